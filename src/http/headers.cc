// Rate-limit header fields: draft-ietf-httpapi-ratelimit-headers-10 (RateLimit-Policy,
// RateLimit), the legacy X-RateLimit-* trio and Retry-After, from sluice Decisions.
#include <algorithm>
#include <cstdio>

#include "http/internal.h"

namespace sluice::http::internal {
namespace {

// The largest sf-integer (RFC 9651 section 3.3.1).
constexpr std::uint64_t kSfIntegerMax = 999'999'999'999'999ULL;

std::string SfInteger(std::uint64_t v) {
  return std::to_string(std::min(v, kSfIntegerMax));
}
std::string SfInteger(std::int64_t v) {
  return SfInteger(static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)));
}

}  // namespace

std::int64_t CeilSeconds(Micros us) {
  if (us <= 0) return 0;
  return (us + 999'999) / 1'000'000;
}

QuotaWindow PolicyQuotaWindow(const Policy& p) {
  QuotaWindow qw;
  switch (p.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra: {
      // Capacity units refill at limit/window: the whole capacity takes
      // capacity * window / limit microseconds.
      qw.q = p.Capacity();
      const unsigned __int128 refill =
          (static_cast<unsigned __int128>(qw.q) * static_cast<unsigned __int128>(p.window) +
           p.limit - 1) /
          std::max<std::uint64_t>(p.limit, 1);
      const unsigned __int128 cap = static_cast<unsigned __int128>(INT64_MAX);
      qw.w = CeilSeconds(static_cast<Micros>(std::min(refill, cap)));
      break;
    }
    case Algorithm::kConcurrency:
      // q permits held at once; no window (the lease is not a quota window).
      qw.q = p.limit;
      qw.w = 0;
      qw.concurrent = true;
      return qw;
    default:
      qw.q = p.limit;
      qw.w = CeilSeconds(p.window);
      break;
  }
  qw.w = std::max<std::int64_t>(qw.w, 1);  // w must be a non-zero integer
  return qw;
}

std::int64_t ResetSeconds(const Decision& d) {
  if (!d.allowed) return std::max<std::int64_t>(CeilSeconds(d.retry_after), 1);
  return CeilSeconds(d.reset_after);
}

std::int64_t RetryAfterSeconds(const Decision& d) {
  return std::max({CeilSeconds(d.retry_after), ResetSeconds(d), std::int64_t{1}});
}

void AppendSfString(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (c < 0x20) {
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

std::string FormatRateLimitPolicy(std::span<const PolicyItem> items) {
  std::string out;
  for (const PolicyItem& it : items) {
    if (!out.empty()) out.append(", ");
    AppendSfString(out, it.name);
    out.append(";q=");
    out.append(SfInteger(it.qw.q));
    if (it.qw.concurrent) {
      // The draft's quota unit for a limit on requests in flight; `w` is optional.
      out.append(";qu=\"concurrent-requests\"");
      continue;
    }
    out.append(";w=");
    out.append(SfInteger(it.qw.w));
  }
  return out;
}

std::string FormatLimitList(std::uint64_t binding_limit, std::span<const PolicyItem> items) {
  std::string out = SfInteger(binding_limit);
  for (const PolicyItem& it : items) {
    out.append(", ");
    out.append(SfInteger(it.qw.q));
    if (it.qw.concurrent) {
      out.append(";qu=\"concurrent-requests\"");
    } else {
      out.append(";w=");
      out.append(SfInteger(it.qw.w));
    }
    if (!it.name.empty()) {
      out.append(";name=");
      AppendSfString(out, it.name);
    }
  }
  return out;
}

std::string FormatRateLimit(std::span<const LimitItem> items) {
  std::string out;
  for (const LimitItem& it : items) {
    if (!out.empty()) out.append(", ");
    AppendSfString(out, it.name);
    out.append(";r=");
    out.append(SfInteger(it.r));
    out.append(";t=");
    out.append(SfInteger(it.t));
  }
  return out;
}

}  // namespace sluice::http::internal
