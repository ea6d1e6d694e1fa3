// Token bucket: `burst` tokens of capacity, refilled continuously at limit/window
// tokens per microsecond; a request takes `cost` tokens.
//
//   t      = max(now, last)
//   tokens = min(burst, tokens + (t - last) * rate)     rate = limit / window (double)
//   allowed <=> tokens + eps >= max(cost, 1)
// A new bucket starts with `initial_tokens` (default: full).
#include <algorithm>
#include <cmath>

#include "core/algorithms.h"

namespace sluice::core {

Decision TokenBucket(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                     std::uint64_t cost, TokenBucketState* out, Micros* expires) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  double tokens;
  Micros t;
  if (fresh) {
    tokens = p.initial_tokens ? static_cast<double>(*p.initial_tokens) : capacity;
    t = now;
  } else {
    t = std::max(now, in.last);
    tokens = std::min(capacity, in.tokens + static_cast<double>(t - in.last) * rate);
  }
  const double need = static_cast<double>(std::max<std::uint64_t>(cost, 1));

  Decision d;
  d.limit = p.Capacity();
  d.allowed = tokens + kEpsilon >= need;
  if (d.allowed) {
    tokens = std::max(0.0, tokens - static_cast<double>(cost));
  } else {
    d.retry_after = std::max<Micros>(1, static_cast<Micros>(std::ceil((need - tokens) / rate)));
  }
  const double whole = std::floor(tokens + kEpsilon);
  d.remaining = static_cast<std::uint64_t>(std::max(0.0, whole));
  d.reset_after = tokens + kEpsilon >= capacity
                      ? 0
                      : static_cast<Micros>(std::ceil((capacity - tokens) / rate));
  out->tokens = tokens;
  out->last = t;
  *expires = t + d.reset_after;
  return d;
}

void TokenBucketRefund(const Policy& p, const TokenBucketState& in, Micros now, std::uint64_t cost,
                       TokenBucketState* out, Micros* expires) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  const Micros t = std::max(now, in.last);
  double tokens = std::min(capacity, in.tokens + static_cast<double>(t - in.last) * rate);
  tokens = std::min(capacity, tokens + static_cast<double>(cost));
  const Micros reset = tokens + kEpsilon >= capacity
                           ? 0
                           : static_cast<Micros>(std::ceil((capacity - tokens) / rate));
  out->tokens = tokens;
  out->last = t;
  *expires = t + reset;
}

}  // namespace sluice::core
