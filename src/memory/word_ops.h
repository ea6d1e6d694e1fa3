// The per-algorithm operations on a slot's state.
#pragma once

#include <cstdint>

#include "core/algorithms.h"
#include "memory/slot.h"

namespace sluice::memory_internal {

// Runs one non-log algorithm on `state` (or a fresh state).
// `max_wait`: StoreCheck::max_wait (reservations; only bucket and GCRA use it).
inline Decision RunWord(const Policy& p, const State& in, bool fresh, Micros now,
                        std::uint64_t cost, State* out, Micros* expires, Micros max_wait) {
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      return core::FixedWindow(p, in.fixed, fresh, now, cost, &out->fixed, expires);
    case Algorithm::kSlidingWindowCounter:
      return core::SlidingWindowCounter(p, in.counter, fresh, now, cost, &out->counter, expires);
    case Algorithm::kTokenBucket:
      return core::TokenBucket(p, in.bucket, fresh, now, cost, &out->bucket, expires, max_wait);
    case Algorithm::kGcra:
      return core::Gcra(p, in.gcra, fresh, now, cost, &out->gcra, expires, max_wait);
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:
      break;
  }
  return {};
}

// Refunds `cost` to the state in `s` (an existing slot of p's algorithm). A word
// state back to full (expires <= now) is fresh: nothing to give back.
// A carry slot (kCarryTag) is refunded only when it records `carry_id`, p's own
// parameters (0: p's are not registered): a state written under others gives nothing
// back; it keeps its id.
void RefundSlot(const Policy& p, Slot* s, Micros now, std::uint64_t cost, std::uint32_t carry_id);

}  // namespace sluice::memory_internal
