// Query and form parameters of sluiced's plain HTTP APIs (service/params.h).
#include "service/params.h"

#include <cstdint>

namespace sluice::service {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A count in 0..max written as plain decimal digits (no sign, space or prefix).
bool ParseCount(const std::string& s, std::uint64_t max, std::uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

}  // namespace

bool PercentDecode(std::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]);
      const int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

Result<Params> ParseQuery(std::string_view query) {
  Params out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const std::size_t eq = part.find('=');
    const std::string_view name = part.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    std::pair<std::string, std::string> p;
    if (!PercentDecode(name, true, &p.first) || !PercentDecode(value, true, &p.second)) {
      return Status::InvalidArgument("invalid percent-encoding in query parameter '" +
                                     std::string(part) + "' (use %XX with two hex digits)");
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<Params> RequestParams(std::string_view query, bool form, std::string_view body) {
  auto params = ParseQuery(query);
  if (!params.ok() || !form) return params;
  auto fields = ParseQuery(body);
  if (!fields.ok()) return fields.status();
  if (fields->empty()) return params;
  if (!params->empty()) {
    // Merged, they made a descriptor nobody asked for; either alone is ambiguous.
    return Status::InvalidArgument("parameters in both the query ('" + params->front().first +
                                   "') and the form body ('" + fields->front().first +
                                   "'): send them in one of the two");
  }
  return fields;
}

Status OneParam(const Params& params, std::string_view name, const std::string** value) {
  *value = nullptr;
  for (const auto& [k, v] : params) {
    if (k != name) continue;
    if (*value != nullptr) {
      return Status::InvalidArgument("parameter '" + std::string(name) +
                                     "' is given more than once (give it once)");
    }
    *value = &v;
  }
  return Status::Ok();
}

Status DescriptorFromParams(const Params& params, RateLimitRequest* r) {
  const std::string* domain = nullptr;
  if (Status s = OneParam(params, "domain", &domain); !s.ok()) return s;
  if (domain == nullptr || domain->empty()) {
    return Status::InvalidArgument("missing query parameter 'domain'");
  }
  std::vector<const std::string*> keys, values;
  for (const auto& [k, v] : params) {
    if (k == "key") keys.push_back(&v);
    if (k == "value") values.push_back(&v);
  }
  if (keys.empty() || keys.size() != values.size()) {
    return Status::InvalidArgument("give one or more key=K&value=V pairs (got " +
                                   std::to_string(keys.size()) + " key and " +
                                   std::to_string(values.size()) + " value parameters)");
  }
  r->domain = *domain;
  r->descriptors.resize(1);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    r->descriptors[0].entries.push_back(Entry{*keys[i], *values[i]});
  }
  const std::string* h = nullptr;
  if (Status s = OneParam(params, "hits", &h); !s.ok()) return s;
  if (h != nullptr) {
    std::uint64_t v = 0;
    if (!ParseCount(*h, 0xffffffffULL, &v)) {
      return Status::InvalidArgument("parameter 'hits' must be an integer in 0..4294967295 (got '" +
                                     *h + "')");
    }
    // The descriptor's own cost, so that hits=0 peeks (a request-level 0 would mean 1).
    r->descriptors[0].has_hits_addend = true;
    r->descriptors[0].hits_addend = v;
  }
  return Status::Ok();
}

}  // namespace sluice::service
