// sluice/store.h: where limiter state lives, and the protocol every store speaks.
//
// A Store runs the algorithms over its state atomically. The Limiter builds the keys
// and hands the store a batch: one operation (StoreOp) applied to up to
// kMaxBatchChecks typed checks at one instant. Implementations: MemoryStore (in
// process) and RedisStore (Lua scripts in Redis).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice {

// The one operation a batch applies to every check in it (docs/algorithms.md).
enum class StoreOp : std::uint8_t {
  // Decides every check at one instant; if every one allows, all costs are consumed,
  // otherwise none is, except that each check of a policy whose overage is not kReject
  // (Policy::overage) then takes per its overage: kCharge its cost up to the debt
  // bound, kDrain what remains (Decision::charged; its decision is then denied and
  // describes the key afterwards as a peek would). Cost 0 peeks, and never charges. A concurrency
  // check of cost 1 acquires its permit.
  // Blocks (Policy::block_for): a check of a blocked key is denied, with retry_after the
  // time left of the block; a check (cost > 0) that its policy denies starts the block.
  kDecide = 0,
  // Gives each check's cost back to its key, atomically (every check or none): "the
  // request failed, give the unit back", and the undo of a reservation. Per algorithm:
  //  - fixed window, sliding window counter: the current window's count goes down by
  //    cost, never below 0; once the window has rolled over, nothing changes;
  //  - token bucket: tokens go up by cost, capped at the capacity;
  //  - GCRA: the TAT moves back by cost emission intervals, never below now;
  //  - sliding window log: up to `cost` units of the newest entries are removed.
  // A key with no state is left as it is. Concurrency checks are left alone (permits
  // are released, not refunded). No decision is written (`out` may be empty).
  kRefund = 1,
  // Penalties (Limiter::Penalize): each cost is consumed whatever the decision, up to a
  // bound (a key's usage at most twice its capacity, docs/algorithms.md "Penalties"),
  // applied whole, atomically; each Decision describes the key afterwards (as a peek:
  // whether a request of cost 1 could pass now). A key left over its limit starts its
  // block (Policy::block_for) unless it is blocked already. Not for concurrency policies.
  kPenalize = 2,
  // Concurrency policies only: frees each check's permit. Applied to each check on its
  // own (never all or nothing); Decision::allowed says whether the permit was held.
  kRelease = 3,
  // Concurrency policies only: the permit now expires at now + lease. Each check on its
  // own; Decision::allowed says whether the permit was held.
  kExtend = 4,
  // Usage reservations (Limiter::ReserveUsage / SettleUsage): settles the reservation
  // StoreCheck::usage_id of each check, whose record (written by the kDecide that
  // reserved it) holds what that check took. `cost` is the actual usage (0..MaxCost()):
  // below what was taken, the difference is given back (kRefund's rule); above it, the
  // difference is decided and taken if it fits, else per the policy's overage
  // (Decision::charged); each check on its own (never all or nothing), at the key's
  // current state (a settle after its window refunds or charges the window it meets).
  // The record is marked settled in the same atomic step and kept until its expiry,
  // so a settle is applied at most once: Decision::allowed is true when it was applied
  // now, false when the record was settled already (nothing changed). Each Decision
  // then describes the key as a peek would. A check whose record is unknown or expired
  // makes the batch NotFound (naming the id) and nothing is applied. Not for
  // concurrency policies.
  kSettle = 5,
};

// The most checks in one batch, for every store and caller.
inline constexpr std::size_t kMaxBatchChecks = 16;

// One check of a batch: only what an algorithm or operation reads. Build it with
// designated initialisers ({.policy = &p, .key = k, .cost = 2}).
struct StoreCheck {
  // A validated policy (required).
  const Policy* policy = nullptr;
  // The full store key (required, not empty).
  std::string_view key;
  // kDecide: 0 peeks (nothing consumed; allowed/retry_after answer for cost 1), else
  // 1..policy->Capacity(); a concurrency check's acquire is 1. kRefund, kPenalize:
  // 1..policy->Capacity(). Ignored by kRelease and kExtend.
  std::uint64_t cost = 1;
  // Concurrency policies: the permit's id (kPermitIdLength lower-case hex characters,
  // sluice/permit.h) that kDecide acquires and kRelease / kExtend act on; empty for a
  // peek. Ignored by the rate algorithms.
  std::string_view permit;
  // kDecide (reservations, Limiter::Reserve): the longest the caller accepts to wait,
  // 0..policy->window microseconds; 0 = a plain decision. Token bucket and GCRA then
  // allow a request that could pass within max_wait, taking its budget now at its
  // future slot, and report Decision::wait. The window algorithms ignore it, as does a
  // peek.
  Micros max_wait = 0;
  // Usage reservations: a reservation id (kPermitIdLength lower-case hex characters,
  // made by the limiter). kDecide with an id records, under (key, id), what the check
  // took (its cost when the batch allows; under an overage, what it charged when
  // denied; else 0), kept for `usage_ttl` microseconds; kSettle settles that record.
  // Empty otherwise. Not with max_wait.
  std::string_view usage_id;
  // kDecide with a usage_id: how long the record (and so a settle) is kept, 1 ms to 366
  // days.
  Micros usage_ttl = 0;
};

// One store call: an operation, its checks (at most kMaxBatchChecks) and the time of
// the call (stores with their own clock, such as Redis, may use theirs instead).
struct StoreBatch {
  StoreOp op = StoreOp::kDecide;
  std::span<const StoreCheck> checks;
  Micros now = 0;
};

// The validation of a batch that every store and entry point applies: Ok, or
// InvalidArgument naming the policy and what is wrong (too many checks, no policy, an
// empty key, a cost out of range for the operation (kDecide, kSettle: up to
// Policy::MaxCost()), a bad permit or usage id, a max_wait outside 0..window, an
// operation the policy's algorithm does not have).
Status ValidateBatch(const StoreBatch& batch);

// Called with the outcome of an asynchronous batch. `decisions` (one per check; empty
// for kRefund and on errors) is valid only during the call.
using RunCallback = std::function<void(const Status& status, std::span<const Decision> decisions)>;

class Store {
 public:
  virtual ~Store() = default;

  // Applies `batch` (StoreOp says how) and writes one Decision per check into `out`
  // (out.size() >= batch.checks.size(); kRefund writes none). An invalid batch gets
  // ValidateBatch's InvalidArgument and changes nothing. Any other error means nothing
  // is known: the store may or may not have applied the batch if the error is
  // kDeadlineExceeded. Thread-safe. The keys and permit ids need to live only for the
  // duration of the call.
  virtual Status Run(const StoreBatch& batch, std::span<Decision> out) = 0;

  // Like Run but may complete later on another thread; `done` is called exactly once.
  // The batch needs to live only for the duration of this call. The default calls Run
  // and then `done` inline.
  virtual void RunAsync(const StoreBatch& batch, RunCallback done);

  // Forgets the state of `key` under `policy`, so its full limit is available again;
  // ends a block of the key (Policy::block_for) too.
  virtual Status Reset(const Policy& policy, std::string_view key) = 0;

  // True when a call leaves the process (network); the Limiter enables its local deny
  // cache only for such stores.
  virtual bool IsRemote() const { return false; }

  // The in-process store that serves this one's calls, if any: MemoryStore returns
  // itself, wrappers return their inner store's, remote stores null. The decision
  // layer takes its in-process fast path through it.
  virtual Store* InProcess() { return nullptr; }

  // Decides one check (StoreOp::kDecide) at the time `clock` reads: the same as
  // Run(StoreBatch{.checks = {check}, .now = clock.Now()}, {out, 1}), which is what the
  // default does. An in-process store reads the clock as late as it can: it starts
  // loading the key's state into the CPU cache first, so that the load overlaps the
  // clock read. Wrappers forward it (ForwardingStore). Thread-safe.
  virtual Status RunOne(const StoreCheck& check, const Clock& clock, Decision* out);
};

}  // namespace sluice
