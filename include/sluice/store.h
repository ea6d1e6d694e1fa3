// sluice/store.h: where limiter state lives.
//
// A Store runs the algorithms over its state atomically. The Limiter builds the
// keys and hands a batch of checks to the store; the store evaluates them all at one
// instant and either consumes every check's cost (all allowed) or none (any denied).
// Implementations: MemoryStore (in process) and RedisStore (Lua scripts in Redis).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice {

// --- concurrency limits (issue #12 item 1) ---
// What a check of a concurrency policy (Algorithm::kConcurrency) does with its permit.
enum class PermitOp : std::uint8_t {
  // Takes a slot for the permit (cost 1), or peeks (cost 0: no permit needed).
  kAcquire = 0,
  // Frees the permit's slot. Decision::allowed: whether the permit was held.
  kRelease = 1,
  // Moves the permit's expiry to now + lease. Decision::allowed: whether it was held.
  kExtend = 2,
};

// One limit to evaluate: a validated policy, the full store key for it, and a cost.
// Cost 0 is a peek: nothing is consumed, and allowed/retry_after answer for cost 1.
// 1 <= cost <= policy->Capacity() otherwise (the Limiter checks this).
struct StoreCheck {
  const Policy* policy = nullptr;
  std::string_view key;
  std::uint64_t cost = 1;
  // --- concurrency limits (issue #12 item 1): concurrency policies only ---
  // The permit's id (kPermitIdLength lower-case hex characters, sluice/permit.h);
  // empty for a peek. Ignored by the rate algorithms.
  std::string_view permit;
  // What the check does with `permit`. Release and extend are applied to each check on
  // its own (never all or nothing, and never held back by another check's denial);
  // their cost is ignored.
  PermitOp op = PermitOp::kAcquire;
  // Reservations (Limiter::Reserve): the longest the caller accepts to wait, in
  // microseconds; 0 = a plain decision. Token bucket and GCRA then allow a request
  // that could pass within max_wait, taking its budget now at its future slot, and
  // report Decision::wait (docs/algorithms.md, "Reservations"). The window
  // algorithms ignore it (they never take future budget). 0 <= max_wait <=
  // policy->window (the Limiter checks this); ignored for a peek (cost 0).
  Micros max_wait = 0;
};

// Called with the outcome of an asynchronous evaluation. `decisions` is valid only
// during the call.
using EvaluateCallback =
    std::function<void(const Status& status, std::span<const Decision> decisions)>;
// Called with the outcome of an asynchronous refund.
using RefundCallback = std::function<void(const Status& status)>;

class Store {
 public:
  virtual ~Store() = default;

  // Evaluates `checks` atomically at time `now` (stores with their own clock, such as
  // Redis, may use theirs instead) and writes one Decision per check into `out`
  // (out.size() >= checks.size()). If every check allows, all costs are consumed;
  // otherwise nothing is. An error status means nothing is known (the store may or may
  // not have applied the checks if the error is kDeadlineExceeded).
  // Concurrency checks (Algorithm::kConcurrency): an acquire (cost 1) is consumed like
  // any check, all or nothing, and holds `permit` until it is released or its lease
  // passes; release and extend checks (StoreCheck::op) are applied whatever the other
  // checks decide, and their Decision::allowed says whether the permit was held.
  // Thread-safe. The keys (and permit ids) need to live only for the duration of the call.
  virtual Status Evaluate(std::span<const StoreCheck> checks, Micros now,
                          std::span<Decision> out) = 0;

  // Like Evaluate but may complete later on another thread; `done` is called exactly
  // once. The default implementation calls Evaluate and then `done` inline.
  virtual void EvaluateAsync(std::span<const StoreCheck> checks, Micros now, EvaluateCallback done);

  // Gives each check's cost back to its key, atomically (every check or none), at time
  // `now` (stores with their own clock use theirs): "the request failed, give the unit
  // back", and the undo of a reservation when another part of a request was denied.
  // Per algorithm (docs/algorithms.md, "Refunds"):
  //  - fixed window, sliding window counter: the current window's count goes down by
  //    cost, never below 0; once the window has rolled over, nothing changes;
  //  - token bucket: tokens go up by cost, capped at the capacity;
  //  - GCRA: the TAT moves back by cost emission intervals, never below now;
  //  - sliding window log: up to `cost` units of the newest entries are removed.
  // A key with no state (never charged, or back to full) is left as it is; keys written
  // keep a TTL. Each cost must be 1..policy->Capacity() (InvalidArgument otherwise).
  // Like Evaluate, an error other than InvalidArgument means the refund may or may not
  // have been applied. Thread-safe. The default implementation returns kInternal
  // ("not supported"); MemoryStore and RedisStore implement it.
  virtual Status Refund(std::span<const StoreCheck> checks, Micros now);

  // Like Refund but may complete later on another thread; `done` is called exactly
  // once. The default implementation calls Refund and then `done` inline.
  virtual void RefundAsync(std::span<const StoreCheck> checks, Micros now, RefundCallback done);

  // Forgets the state of `key` under `policy`, so its full limit is available again.
  virtual Status Reset(const Policy& policy, std::string_view key) = 0;

  // True when a call leaves the process (network); the Limiter enables its local deny
  // cache only for such stores.
  virtual bool IsRemote() const { return false; }
};

}  // namespace sluice
