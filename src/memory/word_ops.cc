#include "memory/word_ops.h"

#include "memory/carry.h"

namespace sluice::memory_internal {

void RefundSlot(const Policy& p, Slot* s, Micros now, std::uint64_t cost, std::uint32_t carry_id) {
  if (p.algorithm == Algorithm::kConcurrency) return;  // permits are released, not refunded
  if (p.algorithm == Algorithm::kSlidingWindowLog) {
    RingLog log(&s->state.log, p.limit);
    core::SlidingWindowLogRefund(p, log, now, cost, &s->expires);
    return;
  }
  if (s->expires <= now) return;
  const bool carry = (s->tag & kCarryTag) != 0;
  if (carry && (carry_id == 0 || CarryId(p.algorithm, s->state) != carry_id)) return;
  const State in = carry ? CleanState(p.algorithm, s->state) : s->state;
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      core::FixedWindowRefund(p, in.fixed, now, cost, &s->state.fixed, &s->expires);
      break;
    case Algorithm::kSlidingWindowCounter:
      core::SlidingWindowCounterRefund(p, in.counter, now, cost, &s->state.counter, &s->expires);
      break;
    case Algorithm::kTokenBucket:
      core::TokenBucketRefund(p, in.bucket, now, cost, &s->state.bucket, &s->expires);
      break;
    case Algorithm::kGcra:
      core::GcraRefund(p, in.gcra, now, cost, &s->state.gcra, &s->expires);
      break;
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:
      break;
  }
  if (carry) SetCarryId(p.algorithm, s->state, carry_id);
}

}  // namespace sluice::memory_internal
