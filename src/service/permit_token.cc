// The permit token of /v1/acquire: "<permit id>.<domain and descriptors, base64url>",
// varint-length-prefixed bytes inside. The one codec of it (service/permit_token.h).
#include "service/permit_token.h"

#include <cstring>

#include "service/plan.h"
#include "sluice/permit.h"

namespace sluice::service {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void AppendVarint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

bool ReadVarint(std::string_view& in, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

void AppendBytes(std::string& out, std::string_view s) {
  AppendVarint(out, s.size());
  out.append(s);
}

bool ReadBytes(std::string_view& in, std::string_view* s) {
  std::uint64_t n = 0;
  if (!ReadVarint(in, &n) || n > in.size()) return false;
  *s = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

std::string Base64Url(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const std::uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                            (static_cast<unsigned char>(in[i + 1]) << 8) |
                            static_cast<unsigned char>(in[i + 2]);
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  if (i < in.size()) {
    std::uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    if (i + 1 < in.size()) out.push_back(kB64[(v >> 6) & 63]);
  }
  return out;
}

bool FromBase64Url(std::string_view in, std::string* out) {
  out->clear();
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const char* pos = std::strchr(kB64, c);
    if (c == '\0' || pos == nullptr) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(pos - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return bits < 6;
}

}  // namespace

std::string EncodePermitToken(std::string_view id, const RateLimitRequest& req) {
  std::string payload;
  AppendBytes(payload, req.domain);
  AppendVarint(payload, req.descriptors.size());
  for (const DescriptorRequest& d : req.descriptors) {
    AppendVarint(payload, d.entries.size());
    for (const Entry& e : d.entries) {
      AppendBytes(payload, e.key);
      AppendBytes(payload, e.value);
    }
  }
  std::string token(id);
  token.push_back('.');
  token.append(Base64Url(payload));
  return token;
}

Status DecodePermitToken(std::string_view token, std::string* id, std::string* storage,
                         RateLimitRequest* req) {
  const auto bad = [&](const char* why) {
    std::string shown(token.substr(0, 80));
    return Status::InvalidArgument("permit '" + shown + (token.size() > 80 ? "...'" : "'") +
                                   " is not a permit token from /v1/acquire (" + why + ")");
  };
  const std::size_t dot = token.find('.');
  if (dot == std::string_view::npos) return bad("no '.'");
  if (!IsPermitId(token.substr(0, dot))) return bad("bad permit id");
  if (!FromBase64Url(token.substr(dot + 1), storage)) return bad("bad encoding");
  std::string_view in(*storage);
  req->descriptors.clear();
  std::uint64_t n = 0;
  if (!ReadBytes(in, &req->domain) || !ReadVarint(in, &n) || n == 0 || n > kMaxChecks) {
    return bad("bad descriptors");
  }
  req->descriptors.resize(n);
  for (DescriptorRequest& d : req->descriptors) {
    std::uint64_t m = 0;
    if (!ReadVarint(in, &m) || m > kMaxEntries) return bad("bad entries");
    d.entries.resize(m);
    for (Entry& e : d.entries) {
      if (!ReadBytes(in, &e.key) || !ReadBytes(in, &e.value)) return bad("bad entry");
    }
  }
  if (!in.empty()) return bad("trailing bytes");
  id->assign(token.substr(0, dot));
  return Status::Ok();
}

}  // namespace sluice::service
