// Internal to the decision layer: the Decider's state and the steps every entry point
// shares (decider.cc: the flow of a batch; decider_outcome.cc: what the store's answer,
// or its failure, makes of the decisions).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "decide/decider.h"
#include "decide/deny_cache.h"
#include "decide/lease.h"
#include "sluice/memory_store.h"

namespace sluice::decide {

// Counters of one stripe: threads add to their own stripe (one cache line), so that
// counting decisions does not bounce a shared line between cores. A decision is counted
// in `decisions`, or in `in_process` when the one-check fast path took it.
struct alignas(64) CounterStripe {
  std::atomic<std::uint64_t> decisions{0}, denied{0}, shadow_denied{0}, deny_cache_hits{0},
      store_errors{0}, fail_open{0}, fail_closed{0}, local_fallback{0}, lease_hits{0},
      lease_grants{0}, lease_returns{0}, in_process{0};
};
inline constexpr std::size_t kCounterStripes = 16;

// The calling thread's stripe.
std::size_t ThisThreadStripe();

struct Decider::Impl {
  Options options;
  MemoryStore fallback_store;
  // The store serves its calls in this process (Store::InProcess, forwarded by
  // wrappers): one-check batches then take the fast path.
  bool in_process = false;
  bool use_deny_cache = false;
  DenyCache deny_cache;
  LeaseTable leases;
  std::array<CounterStripe, kCounterStripes> stripes;

  explicit Impl(Options o)
      : options(std::move(o)),
        fallback_store(MemoryStoreOptions{.max_keys = options.fallback_max_keys, .shards = 16}),
        in_process(options.store->InProcess() != nullptr),
        use_deny_cache(options.deny_cache && options.store->IsRemote()),
        deny_cache(use_deny_cache ? options.deny_cache_bytes : 0),
        leases(options.lease_max_keys) {}

  CounterStripe& Counters() { return stripes[ThisThreadStripe()]; }

  // One group (all enforced or all shadow) ready for the store.
  struct Group {
    Group() {}  // sc is filled by MakeGroup for the checks used, not zeroed per call
    union {
      StoreCheck sc[kMaxBatchChecks];
    };
    const Check* checks = nullptr;
    std::size_t n = 0;
    StoreOp op = StoreOp::kDecide;
    bool too_big = false;
  };

  // The store's view of `c` at `cost`.
  static StoreCheck ToStoreCheck(const Check& c, std::uint64_t cost) {
    return StoreCheck{.policy = c.policy,
                      .key = c.key,
                      .cost = cost,
                      .permit = c.permit,
                      .max_wait = c.max_wait,
                      .usage_id = c.usage_id,
                      .usage_ttl = c.usage_ttl};
  }

  // A decision's cost above its policy's capacity could never pass: the whole group
  // is then only peeked (AfterStore denies that check).
  static void MakeGroup(std::span<const Check> checks, Group& g, StoreOp op = StoreOp::kDecide);

  // The group as a store batch at `now`.
  static StoreBatch BatchOf(const Group& g, Micros now) {
    return StoreBatch{.op = g.op, .checks = std::span<const StoreCheck>(g.sc, g.n), .now = now};
  }

  // Resets every decision but its policy_index.
  static void ClearDecisions(std::span<Decision> out);

  // The entry points' validation: the Decider's own arguments, then the batch the
  // store will see (ValidateBatch, the one validation of checks).
  static Status Validate(std::span<const Check> checks, std::size_t out_size, StoreOp op);

  // True (and fills `out`) when the deny cache decides the group: one known denial
  // decides an all-or-nothing batch.
  bool FromDenyCache(const Group& g, Micros now, std::span<Decision> out);

  // Turns the store's answer into the group's decisions: failures follow each check's
  // failure mode (admissions only: a release or an extend returns the store's error),
  // denials feed the deny cache, and a check left uncharged because another denied
  // reports what really remains. `out` holds the store's decisions.
  Status AfterStore(const Group& g, const Status& s, Micros now, std::span<Decision> out);

  // The store failed: each check follows its own failure mode.
  void OnStoreFailure(const Group& g, Micros now, std::span<Decision> out);

  // The store failed (`s`) during a release or an extend.
  Status PermitOnFallback(const Group& g, const Status& s, Micros now, std::span<Decision> out);

  // A batch the lease table may decide: one enforced check of a leased policy, with a
  // cost below the lease bound (LeaseTable::Acquire answers kPlain otherwise).
  static bool LeaseEligible(std::span<const Check> checks) {
    if (checks.size() != 1) return false;
    const Check& c = checks[0];
    return c.policy->lease > 0 && !c.policy->shadow && c.cost >= 1 && c.cost < c.policy->lease &&
           c.max_wait == 0 &&   // reservations take future budget: always the store's
           c.usage_id.empty();  // a usage reservation is recorded by the store
  }

  // Gives ended leases back, without waiting: a refund that fails leaves the units
  // taken (conservative), so there is nothing to do with its answer.
  void ReturnLeases(std::vector<LeaseReturn>& returns, Micros now);

  // Tries the lease of `c` (LeaseEligible): kLocal fills out[0] (its policy_index
  // kept), kRefill asks for a lease of `grant` units.
  LeaseTable::Take LeaseAcquire(const Check& c, Micros now, std::span<Decision> out);

  // The store answered a lease request of `grant` units for the single check of `gc`
  // (the group at the caller's cost) with `s` and out[0]. True when that decides the
  // request; false when it must be decided through the store at its own cost (the
  // lease was denied but a smaller cost may pass).
  bool AfterLease(const Group& gc, std::uint64_t grant, Micros now, const Status& s,
                  std::span<Decision> out);

  // Shadow rewrite, binding index and counters, once every group is decided.
  // `in_process`: decided by the one-check fast path, counted in in_process instead of
  // decisions (Stats adds both), so that the fast path pays one atomic increment.
  std::size_t Finish(std::span<const Check> checks, std::span<Decision> out,
                     bool in_process = false);
};

}  // namespace sluice::decide
