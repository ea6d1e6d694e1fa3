// Internal: a batch of checks whose keys live in different Redis Cluster hash slots.
//
// One Lua script can only touch keys of one slot, so such a batch cannot be one atomic
// script. It is evaluated as a reservation instead:
//   1. every slot's checks run as one script each (concurrently, all-or-nothing per
//      slot: a slot whose checks all pass consumes them);
//   2. if every slot allowed, the request is allowed;
//   3. otherwise the slots that consumed are refunded (StoreOp::kRefund: the batch
//      script with negated costs) before the caller hears "denied".
// Never over-admits, and a denied request costs nothing once the refunds ran. The one
// cost: between 1 and 3, a concurrent request may see the reserved budget and be
// denied (conservative). When a slot fails (timeout, unreachable) the call fails with
// that error (the failure mode decides); slots known to have consumed are refunded,
// a slot that timed out may have consumed and is not (it cannot be known).
// Checks sharing a hash tag (one caller key, many policies) stay one atomic script.
#pragma once

#include <functional>
#include <span>

#include "redis/deadline.h"
#include "sluice/store.h"

namespace sluice::redis {

// How many distinct hash slots the checks' keys span (1 for an empty batch).
int CountSlots(std::span<const StoreCheck> checks);

// One slot's decisions, and the outcome of one slot's refund.
using EvaluateCallback = RunCallback;
using RefundCallback = std::function<void(const Status& status)>;

// Sends one single-slot batch, answering by `deadline` (the checks outlive the call
// until its callback).
using SlotEvaluate = std::function<void(std::span<const StoreCheck>, Deadline, EvaluateCallback)>;
using SlotRefund = std::function<void(std::span<const StoreCheck>, Deadline, RefundCallback)>;

// The reservation above. `checks` (and their policies) must stay valid until `done`
// is called: keys are copied, policies are not. `done` is called exactly once, with
// one decision per check in the input order; the reservations and the refunds all
// share `deadline`.
void EvaluateAcrossSlots(std::span<const StoreCheck> checks, Deadline deadline,
                         SlotEvaluate evaluate, SlotRefund refund, EvaluateCallback done);

// A refund spanning slots: one refund script per slot, concurrently. Atomic per slot
// only; `done` gets the first error, if any.
void RefundAcrossSlots(std::span<const StoreCheck> checks, Deadline deadline,
                       const SlotRefund& refund, RefundCallback done);

}  // namespace sluice::redis
