// Penalties (Limiter::Penalize): forced consumption, bounded at twice the capacity,
// then a peek at the state after it. Blocks (Policy::block_for): ApplyBlock.
//
// Each penalty runs its algorithm three times: a peek to normalise the state as a
// decision would (window roll, refill, time raised), the forced change, and a peek at
// the result, whose decision is the penalty's answer and whose `expires` is the new
// state's (a peek at a state changes nothing, so its expiry is that state's). The Lua
// penalties (src/redis/lua/penalties.lua) do the same operations on the same doubles.
#include <algorithm>

#include "core/algorithms.h"

namespace sluice::core {

Decision FixedWindowPenalize(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                             std::uint64_t cost, FixedWindowState* out, Micros* expires) {
  FixedWindowState s;
  Micros e;
  (void)FixedWindow(p, in, fresh, now, 0, &s, &e);
  s.count = std::max(s.count, std::min(s.count + cost, 2 * p.limit));
  return FixedWindow(p, s, /*fresh=*/false, now, 0, out, expires);
}

Decision SlidingWindowCounterPenalize(const Policy& p, const SlidingCounterState& in, bool fresh,
                                      Micros now, std::uint64_t cost, SlidingCounterState* out,
                                      Micros* expires) {
  SlidingCounterState s;
  Micros e;
  (void)SlidingWindowCounter(p, in, fresh, now, 0, &s, &e);
  s.curr = std::max(s.curr, std::min(s.curr + cost, 2 * p.limit));
  return SlidingWindowCounter(p, s, /*fresh=*/false, now, 0, out, expires);
}

Decision TokenBucketPenalize(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                             std::uint64_t cost, TokenBucketState* out, Micros* expires) {
  TokenBucketState s;
  Micros e;
  (void)TokenBucket(p, in, fresh, now, 0, &s, &e);
  const double capacity = static_cast<double>(p.Capacity());
  s.tokens = std::max(std::min(s.tokens, -capacity), s.tokens - static_cast<double>(cost));
  return TokenBucket(p, s, /*fresh=*/false, now, 0, out, expires);
}

Decision GcraPenalize(const Policy& p, const GcraState& in, bool fresh, Micros now,
                      std::uint64_t cost, GcraState* out, Micros* expires) {
  GcraState s;
  Micros e;
  (void)Gcra(p, in, fresh, now, 0, &s, &e);
  const double interval = static_cast<double>(p.window) / static_cast<double>(p.limit);
  const double tau = interval * static_cast<double>(p.Capacity());
  const double bound = static_cast<double>(now) + 2 * tau;
  s.tat = std::max(s.tat, std::min(s.tat + static_cast<double>(cost) * interval, bound));
  return Gcra(p, s, /*fresh=*/false, now, 0, out, expires);
}

Decision SlidingWindowLogPenalize(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                                  Micros* expires) {
  Micros e;
  (void)SlidingWindowLog(p, log, now, 0, /*commit=*/false, &e);  // drops what left the window
  const std::uint64_t used = log.used();
  const std::uint64_t room = 2 * p.limit > used ? 2 * p.limit - used : 0;
  const std::uint64_t add = std::min(cost, room);
  if (add > 0) SlidingWindowLogCommit(p, log, now, add, &e);
  return SlidingWindowLog(p, log, now, 0, /*commit=*/false, expires);
}

void ApplyBlock(Decision* d, Micros left) {
  d->allowed = false;
  d->remaining = 0;
  d->retry_after = std::max(d->retry_after, left);
  d->reset_after = std::max(d->reset_after, left);
}

}  // namespace sluice::core
