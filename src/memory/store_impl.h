// MemoryStore's state: its shards, the key count and the carry-over registry. The
// store's operations (memory_store.cc, decide.cc, penalize.cc, permits.cc) share it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "memory/carry.h"
#include "memory/shard.h"
#include "memory/usage.h"
#include "sluice/memory_store.h"

namespace sluice {

struct MemoryStore::Impl {
  using Shard = memory_internal::Shard;
  using LockedShards = memory_internal::LockedShards;
  using ParamsRegistry = memory_internal::ParamsRegistry;

  explicit Impl(MemoryStoreOptions o) : options(o), usage(o.max_keys) {
    std::size_t n = 1;
    while (n < std::max<std::size_t>(1, o.shards)) n <<= 1;
    shards = std::vector<Shard>(n);
  }

  std::size_t ShardOf(std::uint64_t hash) const {
    return memory_internal::ShardIndex(hash, shards.size());
  }

  // Claims room for one more key (counted in `total` at once, so that concurrent
  // batches and several new keys of one batch cannot overshoot the cap), sweeping
  // `shard` (locked) when the cap is reached. False when the cap is reached and
  // nothing there has expired.
  bool Reserve(Shard& shard, Micros now);

  // Blocks (Policy::block_for) of check `c` (of a policy with block_for) in `shard`
  // (locked), whose decision is `d`: a blocked key is denied; a denial by the policy
  // itself (`starts`: not during a block) starts a block, recorded if the key cap
  // leaves room for it (otherwise the denial stands without a block, counted in
  // rejected_full). Returns true when it may have swept the shard's table.
  bool ApplyBlocks(Shard& shard, const StoreCheck& c, Micros now, bool starts, Decision* d);

  // The status of a batch refused at the key cap (counted in rejected_full).
  Status Full();
  // Reserve for a batch that has reserved `*reserved` keys so far (counted up); when
  // the cap is reached, those are given back and false is returned (the batch then
  // fails with Full()).
  bool ReserveFor(Shard& shard, Micros now, std::size_t* reserved);
  // The slot of `key` in `table` for a check of algorithm `a`, or null. A slot holding
  // another algorithm's state is dropped (it means nothing here): *dropped is then set.
  memory_internal::Slot* FindFor(memory_internal::Table& table, std::uint64_t hash,
                                 std::string_view key, Algorithm a, bool* dropped);

  // The store's operations, on validated batches (decide.cc, penalize.cc, refund.cc,
  // permits.cc).
  Status Decide(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out);
  Status Penalize(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out);
  Status Refund(std::span<const StoreCheck> checks, Micros now);
  Status Permits(bool extend, std::span<const StoreCheck> checks, Micros now,
                 std::span<Decision> out);
  // Usage reservations (settle.cc): records what a decided batch's checks with a
  // usage_id took, and settles them (StoreOp::kSettle).
  Status RecordUsage(std::span<const StoreCheck> checks, Micros now,
                     std::span<const Decision> decided);
  Status Settle(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out);

  // penalize.cc's steps: one check applied by force (a penalty, or an overage charge),
  // the room forced checks need, and the overage charges of a denied batch.
  bool Force(LockedShards& locks, std::size_t i, const StoreCheck& c, Micros now, bool overage,
             Decision* out);
  template <typename Apply>
  bool ReserveForced(LockedShards& locks, std::span<const StoreCheck> checks, Micros now,
                     Apply apply, std::size_t* reserved);
  Status ChargeOverage(LockedShards& locks, std::span<const StoreCheck> checks, Micros now,
                       std::span<Decision> out);

  // The state a check of word algorithm p decides on, from slot `s` (null: none), as a
  // decision reads it: into *in, and true when it is fresh (absent, back to full, or
  // carried over from other parameters as fresh). `carry_id`: p's parameters' id when
  // p records them (Policy::on_change), else 0. Decisions and penalties both use it.
  bool NormaliseWord(const Policy& p, const memory_internal::Slot* s, Micros now,
                     std::uint32_t carry_id, memory_internal::State* in);

  // decide.cc's steps: what a batch decided before it commits, the decisions, the
  // token buckets a denied batch starts, and the commit.
  struct Pending;
  void DecideChecks(LockedShards& locks, std::span<const StoreCheck> checks, Micros now,
                    Pending& pending, std::span<Decision> out);
  void StartBuckets(LockedShards& locks, std::span<const StoreCheck> checks, Micros now,
                    const Pending& pending);
  Status Commit(LockedShards& locks, std::span<const StoreCheck> checks, Micros now,
                Pending& pending);

  MemoryStoreOptions options;
  std::vector<Shard> shards;
  ParamsRegistry carry_params;        // carry-over (Policy::on_change)
  memory_internal::UsageTable usage;  // usage reservations (StoreCheck::usage_id)
  std::atomic<std::size_t> total{0};
  std::atomic<std::uint64_t> rejected_full{0};
  std::atomic<std::uint64_t> expired{0};
};

}  // namespace sluice
