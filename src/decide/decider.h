// The decision layer (design.md's `decide`): one batch of checks against a store,
// with everything that is not an algorithm around it: the local deny cache, the
// failure modes (fail-open, fail-closed, local fallback), shadow mode, the binding
// decision and the counters. It knows policies only through the checks it is given,
// so one Decider serves any number of policies: sluice::Limiter owns one for its
// policies, sluiced's engine owns one for every rule and caller override it sees.
//
// Memory is fixed at construction: the deny cache is a byte budget, the local
// fallback store has a key cap. Nothing grows with the number of distinct policies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limiter_stats.h"
#include "sluice/policy.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::decide {

// One check of a batch. The pointers and the key must stay valid for the call (for
// DecideAsync: until it returns; the Decider copies what it keeps).
struct Check {
  // A validated policy.
  const Policy* policy = nullptr;
  // The policy the in-process fallback uses when the store fails and the policy's
  // failure mode is kLocalFallback (see FallbackPolicy). Null: `policy` itself.
  const Policy* fallback = nullptr;
  // The full store key (prefix, caller key and policy name).
  std::string_view key;
  // 0 peeks (nothing is consumed). A cost above the policy's MaxCost() (its capacity
  // under Overage::kReject) could never pass: that check is denied and the whole batch
  // only peeked. Under an overage a cost up to MaxCost() goes to the store (a usage
  // report is charged there, never answered from the deny cache).
  std::uint64_t cost = 1;
  // --- concurrency limits (issue #12 item 1): StoreCheck::permit ---
  // A concurrency check's denial is never put in the deny cache (a release by any
  // process may free a slot before its retry time).
  std::string_view permit;
  // Reservations (StoreCheck::max_wait): 0 = a plain decision. The caller validates it
  // (0..policy->window). Never decided from a lease; the deny cache does not deny it
  // when the cached denial ends within max_wait.
  Micros max_wait = 0;
  // Usage reservations (StoreCheck::usage_id, usage_ttl): the id the store records the
  // check under. Never decided from a lease or the deny cache.
  std::string_view usage_id;
  Micros usage_ttl = 0;
  // Never denied from the deny cache, and its denial not put there: a caller that gives
  // units back (refunds) and asks again right after, whose stale cached denial would
  // outlive the refund.
  bool skip_deny_cache = false;
};

struct Options {
  // Required.
  std::shared_ptr<Store> store;
  // Default: SteadyEpochClock.
  std::shared_ptr<const Clock> clock;
  // Deny locally a key known to be over its limit (only for Store::IsRemote() stores).
  bool deny_cache = true;
  // Byte budget of the deny cache (its slots are fixed-size; keys are kept as a
  // 128-bit hash). Allocated lazily by the OS: untouched slots cost no RSS.
  std::size_t deny_cache_bytes = std::size_t{4} << 20;
  // Key cap of the in-process store used by kLocalFallback.
  std::size_t fallback_max_keys = std::size_t{1} << 20;
  // Keys that may hold a lease (Policy::lease) at once; beyond, decisions of other
  // keys go to the store.
  std::size_t lease_max_keys = std::size_t{1} << 16;
};

// Called once with the outcome of DecideAsync: per-check decisions (valid during the
// call) and the index of the binding one.
using DoneCallback = std::function<void(const Status& status, std::span<const Decision> decisions,
                                        std::size_t binding)>;

// The policy the local fallback enforces for one of `fallback_divisor` servers.
Policy FallbackPolicy(const Policy& p);

// The binding decision of a batch: a denial with the longest retry_after, else the
// one with the longest wait (reservations), then the least remaining (the first on
// ties). `d` must not be empty.
std::size_t BindingIndex(std::span<const Decision> d);

// Thread-safe.
class Decider {
 public:
  explicit Decider(Options options);
  ~Decider();
  Decider(const Decider&) = delete;
  // (The destructor gives every lease back to the store, one refund call each.)
  Decider& operator=(const Decider&) = delete;

  // Decides `checks` (1..kMaxBatchChecks) atomically: enforced checks are consumed all or
  // none; shadow checks (policy->shadow) are decided in a batch of their own and always
  // allowed (shadow_denied tells). A store failure follows each check's own failure
  // mode. A batch of one enforced check whose policy has a lease (Policy::lease) is
  // decided from this Decider's lease of the key when it has one (decide/lease.h). Writes one
  // decision per check into `out` (policy_index is left as the caller set it) and returns the
  // binding index. Errors: InvalidArgument only.
  Result<std::size_t> Decide(std::span<const Check> checks, std::span<Decision> out);

  // The same without blocking the calling thread on the store: `done` runs exactly
  // once, inline or on the store's I/O thread. `checks` need to live only during the
  // call. policy_index of the decisions is the check's index. `op` kRelease or kExtend
  // applies that permit operation to concurrency checks instead (StoreOp; no lease,
  // no deny cache), with the same grouping; no failure mode applies to it: a store
  // error is `done`'s status (a permit the local fallback holds is released or
  // extended there instead), never a claimed success or a false "not held".
  void DecideAsync(std::span<const Check> checks, DoneCallback done, StoreOp op = StoreOp::kDecide);

  // Penalties (Limiter::Penalize): consumes every check's cost by force
  // (StoreOp::kPenalize) in one atomic store call and writes each check's decision after
  // the penalty (a peek for cost 1; blocks applied) into `out`; denials feed the deny
  // cache. Shadow policies report allowed with shadow_denied. No failure mode applies:
  // a store error is returned (InvalidArgument for bad checks). Not counted as
  // decisions. Returns the binding index.
  Result<std::size_t> Penalize(std::span<const Check> checks, std::span<Decision> out);

  // Forgets `key` under `policy`: the store's state, the fallback's, the deny cache
  // and this process's lease of it (not given back: the key is full again).
  Status Reset(const Policy& policy, const Policy* fallback, std::string_view key);

  // Drops a cached denial of `key` (e.g. after budget was refunded to it).
  void ForgetDenial(std::string_view key);

  LimiterStats Stats() const;
  // Decisions taken by the in-process fast path: one enforced check without a lease on
  // a store whose Store::InProcess() is not null (MemoryStore, or a wrapper of one).
  std::uint64_t InProcessDecisions() const;
  // Bytes the deny cache reserves (its fixed budget; 0 when disabled).
  std::size_t DenyCacheBytes() const;
  // Keys the local fallback's in-process store holds, and its key cap.
  std::size_t FallbackKeys() const;
  std::size_t FallbackMaxKeys() const;
  Store& store() const;
  const Clock& clock() const;
  // The in-process store kLocalFallback decides with (a permit taken there is released
  // there: sluice::Permit).
  Store& fallback_store() const;

  // Internal (the asynchronous steps in decider.cc name it).
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::decide
