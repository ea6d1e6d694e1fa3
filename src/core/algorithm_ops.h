// Internal: the one table of per-algorithm operations. Every algorithm whose state is a
// few machine words supplies its operations (decide, refund, penalize, carry-over) in
// its own file (core/<algorithm>.cc, as `k<Algorithm>Ops`) and has one entry in
// kWordOps below; the in-process store (src/memory), the reference model
// (tests/support/reference_store.h) and through the store the CLI simulator call
// them only through this table. The sliding window log and concurrency limits keep
// state of their own shape (SlidingLog, PermitSet: core/algorithms.h), and are called
// directly by the stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "core/algorithms.h"

namespace sluice::core {

// The state of a word algorithm, as the stores keep it.
union WordState {
  WordState() : counter{} {}
  FixedWindowState fixed;
  SlidingCounterState counter;
  TokenBucketState bucket;
  GcraState gcra;
};

// One algorithm's operations on a WordState (algorithms.h has their contracts: the
// decision, <Algorithm>Refund, <Algorithm>Penalize, Carry<Algorithm>).
struct WordOps {
  // `max_wait`: StoreCheck::max_wait (reservations; ignored by the window algorithms).
  Decision (*decide)(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires, Micros max_wait);
  void (*refund)(const Policy& p, const WordState& in, Micros now, std::uint64_t cost,
                 WordState* out, Micros* expires);
  Decision (*penalize)(const Policy& p, const WordState& in, bool fresh, Micros now,
                       std::uint64_t cost, WordState* out, Micros* expires);
  // kProportional carry-over of a state written under `w`: false when it is to be
  // taken as fresh instead.
  bool (*carry)(const Policy& p, const WrittenUnder& w, Micros now, WordState* s);
  // Overage (Policy::overage): a denied check's charge, bounded at OverageBound
  // (<Algorithm>Charge); its decision a peek at the state after it, with `charged`.
  Decision (*charge)(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires);
};

extern const WordOps kFixedWindowOps;           // core/fixed_window.cc
extern const WordOps kSlidingWindowCounterOps;  // core/sliding_window_counter.cc
extern const WordOps kTokenBucketOps;           // core/token_bucket.cc
extern const WordOps kGcraOps;                  // core/gcra.cc

// Indexed by Algorithm's value (the Lua scripts' algorithm ids); null for the
// algorithms whose state is not a WordState.
inline constexpr const WordOps* kWordOps[] = {
    &kFixedWindowOps,           // Algorithm::kFixedWindow
    nullptr,                    // Algorithm::kSlidingWindowLog
    &kSlidingWindowCounterOps,  // Algorithm::kSlidingWindowCounter
    &kTokenBucketOps,           // Algorithm::kTokenBucket
    &kGcraOps,                  // Algorithm::kGcra
    nullptr,                    // Algorithm::kConcurrency
};

// The operations of `a`, or null when its state is not a WordState.
inline const WordOps* WordOpsOf(Algorithm a) {
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(kWordOps) ? kWordOps[i] : nullptr;
}

}  // namespace sluice::core
