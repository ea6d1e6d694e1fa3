// sluice/decision.h: the answer to "may this request pass?".
#pragma once

#include <cstdint>

#include "sluice/clock.h"

namespace sluice {

// Who made a decision.
enum class DecisionSource : std::uint8_t {
  kStore = 0,          // the store ran the algorithm (normal case)
  kDenyCache = 1,      // denied locally: the key was known to be over its limit
  kFailOpen = 2,       // the store failed; allowed by FailureMode::kFailOpen
  kFailClosed = 3,     // the store failed; denied by FailureMode::kFailClosed
  kLocalFallback = 4,  // the store failed; decided by the in-process fallback limiter
  kLease = 5,          // allowed locally from this process's lease (Policy::lease)
};

// "store", "deny_cache", "fail_open", "fail_closed", "local_fallback", "lease".
const char* DecisionSourceName(DecisionSource s);

// The outcome of one check. Durations are microseconds from the decision's `now`.
struct Decision {
  // Whether the request may pass. Always true in shadow mode.
  bool allowed = false;
  // The policy's capacity: the limit per window, or the bucket/GCRA burst.
  std::uint64_t limit = 0;
  // Units that could still be consumed right now (after this request, if allowed).
  std::uint64_t remaining = 0;
  // Time until the limit is fully available again (0 when it already is).
  Micros reset_after = 0;
  // Time until a request of this cost could pass; 0 when allowed. For a peek
  // (cost 0) this is about a request of cost 1.
  Micros retry_after = 0;
  // In shadow mode: the decision would have been a denial.
  bool shadow_denied = false;
  DecisionSource source = DecisionSource::kStore;
  // Index of the policy this decision is about (the binding one for multi-limit calls).
  std::uint16_t policy_index = 0;
  // Reservations (Limiter::Reserve, StoreCheck::max_wait): for an allowed decision,
  // the time the caller must wait before going ahead (its budget is already taken,
  // at that future slot); 0 = go ahead now. Always 0 for a plain decision and for a
  // denial (nothing was taken; retry_after is as for a plain request).
  Micros wait = 0;
  // Overage (Policy::overage): the units a denied decision took anyway (kCharge: its
  // cost up to the debt bound; kDrain: what remained). Its cost minus this was dropped.
  // 0 for an allowed decision (it took its whole cost), a peek and under kReject.
  std::uint64_t charged = 0;
};

}  // namespace sluice
