// Token bucket: `burst` tokens of capacity, refilled continuously at limit/window
// tokens per microsecond; a request takes `cost` tokens.
//
//   t      = max(now, last)
//   tokens = min(burst, tokens + (t - last) * rate)     rate = limit / window (double)
//   allowed <=> tokens + eps >= max(cost, 1)
// A reservation (max_wait > 0) that this denies with retry_after <= max_wait is allowed
// with wait = retry_after = ceil((need - tokens) / rate), and takes its cost at once.
// A new bucket starts with `initial_tokens` (default: full).
//
// With initial_tokens below the capacity, "new" has to mean the same thing whether or
// not a store has kept the key's state (dropping a state must change no decision), so
// it is part of the algorithm:
//  - a bucket is new when it has no state, or when it has been full for a whole
//    window: at last + (time to refill) + window. That is also when its state expires,
//    so a store that dropped it decides exactly as one that kept it;
//  - a request (cost > 0) on a new bucket starts it, allowed or not: the store writes
//    the started state even for a denial (TokenBucketStart), so that the bucket
//    refills from the first request on instead of restarting at every call.
// Without initial_tokens (or with a full one) a new bucket is simply full, which is
// what a dropped full state decides anyway: the state expires once full, as before.
#include <algorithm>
#include <cmath>

#include "core/algorithm_ops.h"
#include "core/algorithms.h"

namespace sluice::core {

namespace {

// Microseconds until `tokens` is back to `capacity` at `rate`: 0 when full.
Micros TimeToFull(double tokens, double capacity, double rate) {
  return tokens + kEpsilon >= capacity ? 0
                                       : static_cast<Micros>(std::ceil((capacity - tokens) / rate));
}

// When a state is back to "new" (see above): once full without initial_tokens, after a
// further window with them.
Micros NewAgainAt(const Policy& p, Micros t, Micros to_full) {
  return TokenBucketStartsOnDenial(p) ? t + to_full + p.window : t + to_full;
}

}  // namespace

bool TokenBucketStartsOnDenial(const Policy& p) {
  return p.initial_tokens.has_value() && *p.initial_tokens < p.Capacity();
}

bool TokenBucketIsNew(const Policy& p, const TokenBucketState& in, Micros now) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  return NewAgainAt(p, in.last, TimeToFull(in.tokens, capacity, rate)) <= now;
}

void TokenBucketStart(const Policy& p, Micros now, TokenBucketState* out, Micros* expires) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  out->tokens = p.initial_tokens ? static_cast<double>(*p.initial_tokens) : capacity;
  out->last = now;
  *expires = NewAgainAt(p, now, TimeToFull(out->tokens, capacity, rate));
}

Decision TokenBucket(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                     std::uint64_t cost, TokenBucketState* out, Micros* expires, Micros max_wait) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  double tokens;
  Micros t;
  if (fresh || TokenBucketIsNew(p, in, now)) {
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
    d.retry_after = std::max<Micros>(1, CeilMicros((need - tokens) / rate));
    // Reservation: the request passes once the bucket has refilled for retry_after;
    // it is allowed now when that is within max_wait, and takes its tokens at once
    // (they go negative: later requests queue behind it).
    if (max_wait > 0 && cost > 0 && d.retry_after <= max_wait) {
      d.allowed = true;
      d.wait = d.retry_after;
      d.retry_after = 0;
      tokens -= static_cast<double>(cost);
    }
  }
  const double whole = std::floor(tokens + kEpsilon);
  d.remaining = static_cast<std::uint64_t>(std::max(0.0, whole));
  d.reset_after = TimeToFull(tokens, capacity, rate);
  out->tokens = tokens;
  out->last = t;
  *expires = NewAgainAt(p, t, d.reset_after);
  return d;
}

void TokenBucketRefund(const Policy& p, const TokenBucketState& in, Micros now, std::uint64_t cost,
                       TokenBucketState* out, Micros* expires) {
  const double capacity = static_cast<double>(p.Capacity());
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  const Micros t = std::max(now, in.last);
  double tokens = std::min(capacity, in.tokens + static_cast<double>(t - in.last) * rate);
  tokens = std::min(capacity, tokens + static_cast<double>(cost));
  out->tokens = tokens;
  out->last = t;
  *expires = NewAgainAt(p, t, TimeToFull(tokens, capacity, rate));
}

// Penalties and overage (core/penalties.cc has the shared rules).
Decision TokenBucketCharge(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                           std::uint64_t cost, std::uint64_t bound, TokenBucketState* out,
                           Micros* expires) {
  TokenBucketState s;
  Micros e;
  (void)TokenBucket(p, in, fresh, now, 0, &s, &e);
  const double floor_tokens = static_cast<double>(p.Capacity()) - static_cast<double>(bound);
  const double was = s.tokens;
  s.tokens = std::max(std::min(s.tokens, floor_tokens), s.tokens - static_cast<double>(cost));
  Decision d = TokenBucket(p, s, /*fresh=*/false, now, 0, out, expires);
  d.charged = ChargedUnits(was - s.tokens);
  return d;
}

Decision TokenBucketPenalize(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                             std::uint64_t cost, TokenBucketState* out, Micros* expires) {
  return TokenBucketCharge(p, in, fresh, now, cost, PenaltyBound(p), out, expires);
}

// Carry-over (Policy::on_change, kProportional; core/carry.cc has the shared rules).
bool CarryTokenBucket(const Policy& p, const WrittenUnder& w, Micros now, TokenBucketState* s) {
  const double old_rate = w.limit / w.window;
  const Micros t = std::max(now, s->last);
  const double tokens = std::min(w.cap, s->tokens + static_cast<double>(t - s->last) * old_rate);
  s->tokens = tokens * static_cast<double>(p.Capacity()) / w.cap;
  s->last = t;
  return true;
}

// This algorithm's entry of the operations table (core/algorithm_ops.h).
namespace {

Decision OpsDecide(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires, Micros max_wait) {
  return TokenBucket(p, in.bucket, fresh, now, cost, &out->bucket, expires, max_wait);
}
void OpsRefund(const Policy& p, const WordState& in, Micros now, std::uint64_t cost, WordState* out,
               Micros* expires) {
  TokenBucketRefund(p, in.bucket, now, cost, &out->bucket, expires);
}
Decision OpsPenalize(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires) {
  return TokenBucketPenalize(p, in.bucket, fresh, now, cost, &out->bucket, expires);
}
bool OpsCarry(const Policy& p, const WrittenUnder& w, Micros now, WordState* s) {
  return CarryTokenBucket(p, w, now, &s->bucket);
}
Decision OpsCharge(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires) {
  return TokenBucketCharge(p, in.bucket, fresh, now, cost, OverageBound(p), &out->bucket, expires);
}

}  // namespace

const WordOps kTokenBucketOps = {OpsDecide, OpsRefund, OpsPenalize, OpsCarry, OpsCharge};

}  // namespace sluice::core
