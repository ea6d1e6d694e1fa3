// Direct JSON <-> engine translation for POST /json.
#include "service/json_api.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::service {
namespace {

using nlohmann::json;

// Matches a JSON member name against a field's proto name and its lowerCamelCase form.
bool Is(const std::string& name, const char* proto, const char* camel) {
  return name == proto || name == camel;
}

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + " " + what);
}

// protobuf JSON: integers as numbers or decimal strings.
Status ReadUint(const json& v, const std::string& where, std::uint64_t max, std::uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<std::uint64_t>();
  } else if (v.is_number_integer()) {
    return Bad(where, "must not be negative");
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // Compared before the cast: a double of 2^64 or more has no uint64 (undefined
    // behaviour, found by the json_request fuzzer with 2.2e40).
    if (!(d >= 0) || d >= 18446744073709551616.0) return Bad(where, "is out of range");
    if (d != static_cast<double>(static_cast<std::uint64_t>(d))) {
      return Bad(where, "must be a non-negative integer");
    }
    *out = static_cast<std::uint64_t>(d);
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 20) return Bad(where, "must be a non-negative integer");
    std::uint64_t x = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return Bad(where, "must be a non-negative integer");
      const auto digit = static_cast<std::uint64_t>(c - '0');
      if (x > (UINT64_MAX - digit) / 10) return Bad(where, "is out of range");
      x = x * 10 + digit;
    }
    *out = x;
  } else {
    return Bad(where, "must be a non-negative integer");
  }
  if (*out > max) return Bad(where, "is larger than " + std::to_string(max));
  return Status::Ok();
}

Status ReadString(const json& v, const std::string& where, std::string_view* out) {
  if (v.is_null()) {
    *out = {};
    return Status::Ok();
  }
  if (!v.is_string()) return Bad(where, "must be a string");
  *out = v.get_ref<const std::string&>();
  return Status::Ok();
}

Status ReadUnit(const json& v, const std::string& where, int* out) {
  static constexpr const char* kNames[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                           "DAY",     "MONTH",  "YEAR",   "WEEK"};
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    for (int i = 0; i < 8; ++i) {
      if (s == kNames[i]) {
        *out = i;
        return Status::Ok();
      }
    }
    return Bad(where, "must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR (got \"" + s + "\")");
  }
  std::uint64_t n = 0;
  if (Status s = ReadUint(v, where, 7, &n); !s.ok()) return s;
  *out = static_cast<int>(n);
  return Status::Ok();
}

Status ParseDescriptor(const json& d, const std::string& where, DescriptorRequest* out) {
  if (!d.is_object()) return Bad(where, "must be an object");
  for (auto it = d.begin(); it != d.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (Is(k, "entries", "entries")) {
      if (v.is_null()) continue;
      if (!v.is_array()) return Bad(where + ".entries", "must be an array");
      out->entries.reserve(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string ew = where + ".entries[" + std::to_string(i) + "]";
        const json& e = v[i];
        if (!e.is_object()) return Bad(ew, "must be an object");
        Entry entry;
        for (auto f = e.begin(); f != e.end(); ++f) {
          if (f.key() == "key") {
            if (Status s = ReadString(f.value(), ew + ".key", &entry.key); !s.ok()) return s;
          } else if (f.key() == "value") {
            if (Status s = ReadString(f.value(), ew + ".value", &entry.value); !s.ok()) return s;
          } else {
            return Bad(ew, "has an unknown field \"" + f.key() + "\"");
          }
        }
        out->entries.push_back(entry);
      }
    } else if (Is(k, "limit", "limit")) {
      if (v.is_null()) continue;
      if (!v.is_object()) return Bad(where + ".limit", "must be an object");
      out->has_override = true;
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (Is(f.key(), "requests_per_unit", "requestsPerUnit")) {
          std::uint64_t n = 0;
          if (Status s = ReadUint(f.value(), where + ".limit.requests_per_unit",
                                  std::numeric_limits<std::uint32_t>::max(), &n);
              !s.ok()) {
            return s;
          }
          out->override_requests_per_unit = static_cast<std::uint32_t>(n);
        } else if (f.key() == "unit") {
          if (Status s = ReadUnit(f.value(), where + ".limit.unit", &out->override_unit); !s.ok()) {
            return s;
          }
        } else {
          return Bad(where + ".limit", "has an unknown field \"" + f.key() + "\"");
        }
      }
    } else if (Is(k, "hits_addend", "hitsAddend")) {
      if (v.is_null()) continue;
      out->has_hits_addend = true;
      if (Status s = ReadUint(v, where + ".hits_addend", kMaxHitsAddend, &out->hits_addend);
          !s.ok()) {
        return s;
      }
    } else {
      return Bad(where, "has an unknown field \"" + k + "\"");
    }
  }
  return Status::Ok();
}

void AppendString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out.append(buf);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "\"OK\"";
    case Code::kOverLimit:
      return "\"OVER_LIMIT\"";
    default:
      return "\"UNKNOWN\"";
  }
}

const char* UnitEnumName(Unit u) {
  switch (u) {
    case Unit::kSecond:
      return "\"SECOND\"";
    case Unit::kMinute:
      return "\"MINUTE\"";
    case Unit::kHour:
      return "\"HOUR\"";
    case Unit::kDay:
      return "\"DAY\"";
    case Unit::kWeek:
      return "\"WEEK\"";
    case Unit::kMonth:
      return "\"MONTH\"";
    case Unit::kYear:
      return "\"YEAR\"";
    default:
      return "\"UNKNOWN\"";
  }
}

// protobuf's Duration JSON: seconds with 0, 3, 6 or 9 fraction digits and an "s".
void AppendDuration(std::string& out, Micros us) {
  char buf[48];
  const long long s = us / 1'000'000;
  const long long frac = us % 1'000'000;
  if (frac == 0) {
    std::snprintf(buf, sizeof buf, "\"%llds\"", s);
  } else if (frac % 1000 == 0) {
    std::snprintf(buf, sizeof buf, "\"%lld.%03llds\"", s, frac / 1000);
  } else {
    std::snprintf(buf, sizeof buf, "\"%lld.%06llds\"", s, frac);
  }
  out.append(buf);
}

// A member name given twice in one object (protobuf's two spellings of a field count as
// one name): the parser keeps the last, another reader the first, so it is refused, as
// the YAML loader refuses duplicate keys. Called by the parser for every event.
struct DuplicateFields {
  // Per open object: its names, canonical and as written.
  std::vector<std::vector<std::pair<std::string, std::string>>> open;
  std::string repeated, first;  // the first repeat found, and its earlier spelling

  static std::string Canonical(const std::string& name) {
    std::string out;
    for (char c : name) {
      if (c >= 'A' && c <= 'Z') {
        out.push_back('_');
        out.push_back(static_cast<char>(c - 'A' + 'a'));
      } else {
        out.push_back(c);
      }
    }
    return out;
  }
  bool operator()(int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == json::parse_event_t::object_end && !open.empty()) {
      open.pop_back();
    } else if (event == json::parse_event_t::key && !open.empty() && repeated.empty()) {
      const std::string& name = parsed.get_ref<const std::string&>();
      std::string c = Canonical(name);
      for (const auto& [canon, as] : open.back()) {
        if (canon != c) continue;
        repeated = name;
        first = as;
        return true;
      }
      open.back().emplace_back(std::move(c), name);
    }
    return true;
  }
};

}  // namespace

namespace {

// The JSON request in `body` (as ParseJsonRequest); with `usage` set, a report: the
// field "usage" is required and read into it, hits_addend is refused.
Status ParseRequest(std::string_view body, std::size_t max_descriptors, JsonRequest* out,
                    std::optional<std::uint64_t>* usage) {
  DuplicateFields dups;
  out->doc = json::parse(body, std::ref(dups), /*allow_exceptions=*/false);
  const json& doc = out->doc;
  if (!doc.is_discarded() && !dups.repeated.empty()) {
    return Status::InvalidArgument(
        "invalid JSON request: field \"" + dups.repeated +
        "\" is given more than once in one object" +
        (dups.first == dups.repeated ? "" : " (also as \"" + dups.first + "\")") +
        ": give it once");
  }
  if (doc.is_discarded()) {
    // Bad input only: parse again to learn where and why (the exception stays here).
    std::string why = "malformed JSON";
    try {
      const json unused = json::parse(body);
      (void)unused;
    } catch (const json::exception& e) {
      // parse_error, and out_of_range for a number no double holds ("1e400").
      why = e.what();
      const std::size_t p = why.find("] ");
      if (p != std::string::npos) why = why.substr(p + 2);
    }
    return Status::InvalidArgument("invalid JSON request: " + why);
  }
  if (!doc.is_object()) return Status::InvalidArgument("invalid JSON request: not an object");
  RateLimitRequest& r = out->request;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "domain") {
      if (Status s = ReadString(v, "domain", &r.domain); !s.ok()) return s;
    } else if (usage != nullptr && k == "usage") {
      std::uint64_t n = 0;
      if (Status s = ReadUint(v, "usage", kMaxHitsAddend, &n); !s.ok()) return s;
      *usage = n;
    } else if (Is(k, "hits_addend", "hitsAddend")) {
      if (usage != nullptr) {
        return Status::InvalidArgument(
            "a report's cost is its \"usage\": hits_addend does not apply");
      }
      if (v.is_null()) continue;
      std::uint64_t n = 0;
      if (Status s = ReadUint(v, "hits_addend", std::numeric_limits<std::uint32_t>::max(), &n);
          !s.ok()) {
        return s;
      }
      r.hits_addend = static_cast<std::uint32_t>(n);
    } else if (k == "descriptors") {
      if (v.is_null()) continue;
      if (!v.is_array()) return Bad("descriptors", "must be an array");
      if (v.size() > max_descriptors) {
        return Status::InvalidArgument("too many descriptors: " + std::to_string(v.size()) +
                                       " (at most " + std::to_string(max_descriptors) + ")");
      }
      r.descriptors.resize(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (Status s =
                ParseDescriptor(v[i], "descriptors[" + std::to_string(i) + "]", &r.descriptors[i]);
            !s.ok()) {
          return s;
        }
      }
    } else {
      return Status::InvalidArgument("unknown field \"" + k + "\" in the request");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseJsonRequest(std::string_view body, std::size_t max_descriptors, JsonRequest* out) {
  return ParseRequest(body, max_descriptors, out, nullptr);
}

Status ParseReportRequest(std::string_view body, std::size_t max_descriptors, JsonRequest* out) {
  std::optional<std::uint64_t> usage;
  if (Status s = ParseRequest(body, max_descriptors, out, &usage); !s.ok()) return s;
  if (!usage) {
    return Status::InvalidArgument(
        "missing field \"usage\": the units to charge (a whole number 0-" +
        std::to_string(kMaxHitsAddend) + ")");
  }
  for (DescriptorRequest& d : out->request.descriptors) {
    if (d.has_hits_addend) {
      return Status::InvalidArgument(
          "a report's cost is its \"usage\": a descriptor's hits_addend does not apply");
    }
    d.has_hits_addend = true;
    d.hits_addend = *usage;
  }
  return Status::Ok();
}

namespace {

// The fields of one limit in /v1/check's answer, from "code" (or "limit") to "unit"
// (alphabetical: limit, [limited, limits,] name, remaining, ...): `middle` goes between
// "limit" and "name".
void AppendCheckLimit(std::string& out, const DescriptorStatus& s, bool with_code,
                      const std::string& middle) {
  if (with_code) {
    out.append("\"code\":");
    out.append(CodeName(s.code));
    out.push_back(',');
  }
  // The capacity: what remaining counts down from, as X-RateLimit-Limit says (a token
  // bucket's burst, not its rate).
  out.append("\"limit\":");
  out.append(std::to_string(s.capacity));
  out.append(middle);
  if (!s.name.empty()) {
    out.append(",\"name\":");
    AppendString(out, s.name);
  }
  if (s.above_capacity) {
    out.append(",\"reason\":");
    AppendString(out, "the request's cost is above the limit's capacity (" +
                          std::to_string(s.capacity) + "): it can never pass");
  }
  out.append(",\"remaining\":");
  out.append(std::to_string(s.limit_remaining));
  out.append(",\"reset_after_ms\":");
  out.append(std::to_string((s.duration_until_reset + 999) / 1000));
  out.append(",\"retry_after_ms\":");
  out.append(std::to_string((s.retry_after + 999) / 1000));
  out.append(",\"unit\":");
  AppendString(out, s.concurrency ? "concurrent" : UnitName(s.unit));
}

}  // namespace

std::string RenderCheckResponse(const RateLimitResponse& r) {
  const DescriptorStatus& st = r.statuses.at(0);
  std::string out;
  out.reserve(160 + 160 * st.limits.size());
  out.append(r.overall_code == Code::kOverLimit ? "{\"allowed\":false,\"code\":"
                                                : "{\"allowed\":true,\"code\":");
  out.append(CodeName(st.code));
  if (!st.has_limit) {
    out.append(",\"limited\":false}\n");
    return out;
  }
  out.push_back(',');
  std::string middle = ",\"limited\":true";
  if (!st.limits.empty()) {
    middle.append(",\"limits\":[");
    for (std::size_t i = 0; i < st.limits.size(); ++i) {
      if (i) middle.push_back(',');
      middle.push_back('{');
      AppendCheckLimit(middle, st.limits[i], true, "");
      middle.push_back('}');
    }
    middle.push_back(']');
  }
  AppendCheckLimit(out, st, false, middle);
  out.append("}\n");
  return out;
}

std::string RenderAcquireResponse(const PermitResponse& r) {
  std::string out = RenderCheckResponse(r.rate);
  if (r.permit.empty()) return out;
  // The check answer's fields, then the permit and its lease.
  out.resize(out.size() - 2);  // "}\n"
  out.append(",\"lease_ms\":");
  out.append(std::to_string((r.lease + 999) / 1000));
  out.append(",\"permit\":");
  AppendString(out, r.permit);
  out.append("}\n");
  return out;
}

std::string RenderJsonResponse(const RateLimitResponse& r) {
  std::string out;
  out.reserve(256 + 160 * r.statuses.size());
  out.append("{\"overallCode\":");
  out.append(CodeName(r.overall_code));
  if (!r.statuses.empty()) {
    out.append(",\"statuses\":[");
    for (std::size_t i = 0; i < r.statuses.size(); ++i) {
      const DescriptorStatus& s = r.statuses[i];
      if (i) out.push_back(',');
      out.append("{\"code\":");
      out.append(CodeName(s.code));
      if (s.has_limit) {
        out.append(",\"currentLimit\":{");
        bool first = true;
        if (s.requests_per_unit != 0) {
          out.append("\"requestsPerUnit\":");
          out.append(std::to_string(s.requests_per_unit));
          first = false;
        }
        if (s.unit != Unit::kUnknown) {
          if (!first) out.push_back(',');
          out.append("\"unit\":");
          out.append(UnitEnumName(s.unit));
          first = false;
        }
        if (!s.name.empty()) {
          if (!first) out.push_back(',');
          out.append("\"name\":");
          AppendString(out, s.name);
        }
        out.push_back('}');
      }
      if (s.limit_remaining != 0) {
        out.append(",\"limitRemaining\":");
        out.append(std::to_string(s.limit_remaining));
      }
      if (s.has_limit) {
        out.append(",\"durationUntilReset\":");
        AppendDuration(out, s.duration_until_reset);
      }
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (!r.response_headers.empty()) {
    out.append(",\"responseHeadersToAdd\":[");
    for (std::size_t i = 0; i < r.response_headers.size(); ++i) {
      if (i) out.push_back(',');
      out.append("{\"key\":");
      AppendString(out, r.response_headers[i].first);
      out.append(",\"value\":");
      AppendString(out, r.response_headers[i].second);
      out.push_back('}');
    }
    out.push_back(']');
  }
  out.append("}\n");
  return out;
}

}  // namespace sluice::service
