// sluice/limiter.h: the public entry point.
//
//   sluice::LimiterOptions o;
//   o.policies = {sluice::Policy::SlidingWindowCounter("api", 100, std::chrono::minutes(1))};
//   auto limiter = sluice::Limiter::Create(std::move(o));   // in-process store
//   auto d = (*limiter)->Acquire("user:42");
//   if (d.ok() && !d->allowed) { /* 429, retry after d->retry_after us */ }
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limiter_stats.h"
#include "sluice/permit.h"
#include "sluice/policy.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice {

struct LimiterOptions {
  // One or more policies (unique names). Acquire(key) checks the key against all of
  // them at once: "10/s and 1000/day".
  std::vector<Policy> policies;
  // Where state lives. Default: a new MemoryStore. Switching to Redis is this one line.
  std::shared_ptr<Store> store;
  // Where "now" comes from. Default: SteadyEpochClock. Stores with their own clock
  // (Redis) ignore it.
  std::shared_ptr<const Clock> clock;
  // Prepended to every store key: 1-64 chars of [A-Za-z0-9_.-].
  std::string key_prefix = "sluice";
  // Shadow mode for every policy: decide and report, always allow.
  bool shadow = false;
  // Deny locally, without a store call, a key known to be over its limit until its
  // retry time. Only used with remote stores (Store::IsRemote()). It cannot change a
  // decision unless the key is Reset by another process.
  bool deny_cache = true;
  // Upper bound on entries of the deny cache.
  std::size_t deny_cache_max_keys = 65536;
  // Where AcquireWaiting waits. Default: SystemSleeper (real time). Tests that inject
  // a ManualClock inject a ManualSleeper on it, so that waits are simulated time.
  std::shared_ptr<Sleeper> sleeper;
};

// One limit of a multi-limit call: the policy (by index into LimiterOptions::policies),
// the caller key and the cost.
struct Check {
  std::size_t policy = 0;
  std::string_view key;
  std::uint64_t cost = 1;
};

class Limiter;

// Budget taken ahead by Limiter::Reserve ("waiting instead of rejecting"). Movable, not
// copyable, not thread-safe (one owner). Destroying it does NOT give the budget back:
// the request is assumed to go ahead after its wait (as Go's rate.Reservation);
// Cancel() gives it back. The Limiter must outlive it.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation();

  // The binding decision. allowed: the budget of every check is taken and the caller
  // may go ahead after decision().wait microseconds (from the decision's time). Denied:
  // nothing was taken; retry_after is as for a plain request of this cost.
  const Decision& decision() const { return decision_; }
  bool allowed() const { return decision_.allowed; }
  Micros wait() const { return decision_.wait; }
  // True while the reservation holds budget: allowed, with a cost, not yet cancelled.
  bool held() const { return !held_.empty(); }

  // Gives the reserved budget back (StoreOp::kRefund of each check's cost, atomically):
  // for the caller that will not go ahead. The refund gives back the key's newest
  // budget, not necessarily this reservation's own slot (docs/algorithms.md,
  // "Reservations"). Ok and nothing done when nothing is held. After any attempt the
  // reservation holds nothing; a store error (Unavailable, DeadlineExceeded) is
  // returned as is and the budget then stays taken (conservative).
  Status Cancel();

 private:
  friend class Limiter;
  struct Held {
    std::size_t policy;
    std::uint64_t cost;
    std::string key;
  };
  Limiter* limiter_ = nullptr;
  Decision decision_;
  std::vector<Held> held_;
};

// --- usage charged after the fact (issue #21 item 3; docs/library.md, "Reserve and
// settle") ---
// What Limiter::ReserveUsage answers.
struct UsageReservation {
  // The binding decision of the estimate, taken like Acquire's (per each policy's
  // overage when denied). The caller does the work only when it is allowed.
  Decision decision;
  // The reservation's id (kPermitIdLength lower-case hex characters) to pass to
  // SettleUsage; empty when the store recorded nothing (the store failed and a failure
  // mode decided: there is nothing to settle).
  std::string id;
};

// What Limiter::SettleUsage answers.
struct UsageSettlement {
  // The decision of the policy with the least remaining after the settle, describing
  // the key as a peek would; `allowed` is true when the settle was applied now, and
  // `charged` the units of a difference above the estimate that did not fit and were
  // taken by the policy's overage.
  Decision decision;
  // True when this id had been settled before: nothing changed (a retried settle).
  bool already_settled = false;
};

// Thread-safe. All methods may be called concurrently from any thread. Decisions never
// throw; errors are returned. A store failure is not an error: the policy's
// FailureMode turns it into a Decision (see Decision::source).
class Limiter {
 public:
  // Validates the options (every policy, unique names, prefix). Errors name the field.
  static Result<std::unique_ptr<Limiter>> Create(LimiterOptions options);
  ~Limiter();
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // Takes `cost` units for `key` from every policy, atomically: all pass and are
  // consumed, or none is. Returns the binding decision (a denying one with the longest
  // retry_after, else the one with the least remaining); `per_policy`, if not empty
  // (size >= policies().size()), receives one decision per policy. Errors:
  // InvalidArgument for an empty or over-long key, or a cost above a policy's capacity,
  // or when a policy is a concurrency limit (its slot would never be released: use
  // AcquirePermit; Peek works).
  Result<Decision> Acquire(std::string_view key, std::uint64_t cost = 1,
                           std::span<Decision> per_policy = {});

  // Like Acquire(key) but each check names its policy, key and cost; all are decided
  // and consumed atomically. `per_check` receives one decision per check. A check of a
  // concurrency policy must have cost 0 (a peek): InvalidArgument otherwise.
  Result<Decision> Acquire(std::span<const Check> checks, std::span<Decision> per_check = {});

  // What Acquire(key, 1) would answer, without consuming anything. For a concurrency
  // policy: remaining = free slots, allowed when one is free, retry_after (when none
  // is) = until the earliest held permit expires.
  Result<Decision> Peek(std::string_view key, std::span<Decision> per_policy = {});

  // Gives `cost` units back to `key` under every policy, atomically: "the request
  // failed, give the unit back" after an allowed Acquire. What each algorithm gives
  // back is StoreOp::kRefund's (a window count never below 0 and not after the window
  // rolled over, tokens capped at the capacity, a GCRA TAT never before now, the
  // newest sliding-log entries); a key with no state is left as it is. Refunding more
  // than was taken cannot mint budget beyond a full limit. Errors: InvalidArgument for
  // a bad key, a cost of 0 or above a policy's capacity; a store error (Unavailable,
  // DeadlineExceeded) is returned as is: the budget then stays taken (conservative).
  Status Refund(std::string_view key, std::uint64_t cost = 1);

  // Like Refund(key, cost) but each check names its policy, key and cost (the checks of
  // an Acquire(checks) call); all are refunded atomically.
  Status Refund(std::span<const Check> checks);
  // (Refund(key, cost) leaves concurrency policies alone; Refund(checks) naming one is
  // an InvalidArgument: a permit is given back with Release.)

  // --- concurrency limits (issue #12 item 1; sluice/permit.h) ---
  // Takes a permit for `key`: one slot under every concurrency policy (fewer than
  // max_in_flight held) and `cost` units from every rate policy, all in one atomic
  // store call (all pass and are taken, or nothing is). The limiter makes the permit's
  // id (128 random bits). Allowed: the Permit is held() and releases on destruction.
  // Denied: the Permit holds nothing and its decision() says why (for a concurrency
  // denial retry_after is until the earliest held permit expires; a release may free
  // a slot sooner). `per_policy` as in Acquire. A store failure follows each policy's
  // failure mode: fail-open allows a permit that holds nothing in the store (its
  // release is a no-op), local fallback holds it in the in-process fallback store,
  // fail-closed denies. Errors: InvalidArgument as Acquire (cost 1..capacity of each
  // rate policy), or when no policy is a concurrency limit.
  Result<Permit> AcquirePermit(std::string_view key, std::uint64_t cost = 1,
                               std::span<Decision> per_policy = {});

  // Like AcquirePermit(key, cost) but each check names its policy, key and cost (as
  // Acquire(checks)): one slot under each check of a concurrency policy (whatever its
  // cost) and each rate check's cost, all in one atomic store call. The Permit holds
  // (and releases, extends) every concurrency check's slot; its key() is the first
  // check's. Errors: as Acquire(checks), or when no check is of a concurrency policy.
  Result<Permit> AcquirePermit(std::span<const Check> checks, std::span<Decision> per_check = {});

  // Releases the permit `permit_id` of `key` under every concurrency policy, for a
  // permit held by id (another process, an HTTP client; Permit::Detach). Errors:
  // InvalidArgument for a bad key or an id that is not kPermitIdLength hex characters;
  // NotFound naming the permit when no concurrency policy holds it (unknown, released
  // already, or expired); store errors (Unavailable, DeadlineExceeded) as is.
  Status Release(std::string_view key, std::string_view permit_id);

  // Moves the expiry of `permit_id` of `key` to now + lease under every concurrency
  // policy that holds it. Errors as Release (NotFound: held by none, e.g. expired).
  Status Extend(std::string_view key, std::string_view permit_id);

  // Penalties and blocks (docs/library.md, "Penalties and blocks").
  // Takes `cost` units from `key` under every policy, atomically, even when that takes
  // the key over its limit ("a failed login costs 5"): window counts may exceed the
  // limit, token bucket tokens go negative, a GCRA TAT moves forward, a sliding log
  // gains the entry; bounded so that a key's usage is at most twice its capacity.
  // A policy with block_for whose key is then over its limit (a request of cost 1 would
  // be denied) starts its block, unless the key is blocked already. Returns the state
  // after the penalty as a Peek would report it: the binding decision (`per_policy`
  // as for Acquire), allowed when a request of cost 1 could still pass, retry_after
  // until one could (the block's end when blocked). Errors: InvalidArgument for a bad
  // key or a cost of 0 or above a policy's capacity; a store error is returned as is
  // (no failure mode applies: nothing to allow or deny), and the penalty may or may not
  // have been applied (DeadlineExceeded).
  Result<Decision> Penalize(std::string_view key, std::uint64_t cost = 1,
                            std::span<Decision> per_policy = {});

  // Gives `cost` units back to `key` under every policy ("a proven-good client"): the
  // same operation as Refund(key, cost), so it never mints budget beyond a full limit
  // and works off a penalty's overdraft first. It does not end a block (Reset does).
  Status Reward(std::string_view key, std::uint64_t cost = 1);

  // Forgets `key` under every policy: its full limits are available again, and a
  // block (Policy::block_for) ends.
  Status Reset(std::string_view key);

  // ---- Waiting instead of rejecting (issue #12; docs/library.md, docs/algorithms.md) ----

  // Like Acquire(key, cost) but a request that could pass within `max_wait`
  // microseconds is allowed now: its budget is taken at once, at its future slot, and
  // decision().wait tells how long to wait before going ahead (Go's
  // rate.Limiter.Reserve). Otherwise nothing is taken (denied). Every policy must fit
  // within max_wait, all or nothing; the wait is the longest. Token bucket and GCRA
  // reserve future budget; the window algorithms never do (they allow now or deny,
  // wait 0; AcquireWaiting retries them). Errors: those of Acquire, and
  // InvalidArgument for a max_wait below 0 or above a policy's window. max_wait 0 is
  // a plain Acquire.
  Result<Reservation> Reserve(std::string_view key, std::uint64_t cost, Micros max_wait,
                              std::span<Decision> per_policy = {});
  // The same for the checks of an Acquire(checks) call.
  Result<Reservation> Reserve(std::span<const Check> checks, Micros max_wait,
                              std::span<Decision> per_check = {});

  // Reserve, then wait for the reservation's time through LimiterOptions::sleeper; a
  // denial of a window algorithm whose retry_after fits in what is left of max_wait
  // is waited for and tried again, until max_wait is used up. Returns the allowed
  // decision with `wait` = the total time waited, or the last denial (nothing taken).
  // When `cancel` (may be null) is cancelled during a wait, the reservation is given
  // back and the status is kCancelled. Blocks the calling thread. Errors: as Reserve.
  Result<Decision> AcquireWaiting(std::string_view key, std::uint64_t cost, Micros max_wait,
                                  CancellationToken* cancel = nullptr,
                                  std::span<Decision> per_policy = {});
  // The same for the checks of an Acquire(checks) call.
  Result<Decision> AcquireWaiting(std::span<const Check> checks, Micros max_wait,
                                  CancellationToken* cancel = nullptr,
                                  std::span<Decision> per_check = {});

  // ---- Usage charged after the work (docs/library.md, "Reserve and settle") ----

  // Takes `estimate` units for `key` from every policy before the work, as Acquire
  // does (all or nothing; a denial takes per each policy's overage), and records what
  // each policy took under a new reservation id for `settle_within` microseconds (0:
  // 15 minutes; at most 366 days). Estimate 0 only looks (a peek) and records 0.
  // Errors: those of Acquire (the estimate may be up to Policy::MaxCost()), and
  // InvalidArgument when a policy is a concurrency limit or settle_within is out of
  // range.
  Result<UsageReservation> ReserveUsage(std::string_view key, std::uint64_t estimate,
                                        Micros settle_within = 0,
                                        std::span<Decision> per_policy = {});
  // The same for checks (policy, key, estimate), as Acquire(checks).
  Result<UsageReservation> ReserveUsage(std::span<const Check> checks, Micros settle_within = 0,
                                        std::span<Decision> per_check = {});

  // Settles reservation `id` of `key` with the `actual` usage (0..Policy::MaxCost())
  // under every policy: below the estimate the difference is given back (as Refund),
  // above it the difference is taken if it fits, else per the policy's overage
  // (StoreOp::kSettle). Applied at most once, atomically with recording that it was:
  // a retry (after a timeout or a crash) answers already_settled and changes nothing.
  // A settle after the reservation's window applies to the key's current state.
  // Errors: InvalidArgument for a bad key or id (not kPermitIdLength lower-case hex
  // characters) or an actual above a policy's MaxCost(); NotFound naming the id when it
  // is unknown or expired; store errors (Unavailable, DeadlineExceeded: the settle may
  // or may not have been applied; retrying is safe) as is. No failure mode applies.
  Result<UsageSettlement> SettleUsage(std::string_view key, std::string_view id,
                                      std::uint64_t actual, std::span<Decision> per_policy = {});
  // The same for the checks of a ReserveUsage(checks) call, each with its actual usage
  // as its cost.
  Result<UsageSettlement> SettleUsage(std::span<const Check> checks, std::string_view id,
                                      std::span<Decision> per_check = {});

  // Index of the policy named `name`, or NotFound.
  Result<std::size_t> FindPolicy(std::string_view name) const;
  const std::vector<Policy>& policies() const;
  LimiterStats Stats() const;

 private:
  friend class Permit;  // Release / Extend / the destructor
  // Releases or extends what `permit` holds (its store and fallback policies).
  Status PermitCall(Permit& permit, StoreOp op);
  Status PermitById(std::string_view key, std::string_view permit_id, StoreOp op);
  void CountReleaseError();
  struct Impl;
  explicit Limiter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
