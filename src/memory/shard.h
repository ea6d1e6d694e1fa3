// One shard of the in-process store, and the locking prologue every batch shares.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "memory/block_table.h"
#include "memory/key_hash.h"
#include "memory/memory_store_internal.h"
#include "memory/shard_lock.h"
#include "memory/table.h"
#include "sluice/store.h"

namespace sluice::memory_internal {

// Two cache lines: what every decision writes (the lock and `latest`) on the first,
// the table header (read on every decision, written only by inserts and sweeps) on
// the second, so that threads deciding in the same shard move one line between
// cores, not two.
struct alignas(64) Shard {
  ShardLock mu;
  // The latest `now` this shard has decided at. Decisions use at least this time, so
  // the store's time never goes back: a state dropped because it was back to "full"
  // at a later time is never missed by a request stamped earlier (otherwise whether
  // an idle key had been swept would change that request's decision). Written only
  // when it moves.
  Micros latest = std::numeric_limits<Micros>::min();
  // Blocks of this shard's keys (null until the first one; owned). A plain pointer
  // keeps Shard standard-layout (the offsetof below).
  BlockTable* blocks = nullptr;
  alignas(64) Table table;

  Shard() = default;
  ~Shard() { delete blocks; }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
};
static_assert(offsetof(Shard, table) == 64, "lock and latest share the first line");

constexpr std::size_t kMaxBatch = kMaxBatchChecks;

// True when a check of a decision takes something when its batch allows: a cost above 0.
inline bool Consumes(const StoreCheck& c) {
  return c.cost > 0;
}

// The prologue every batch shares: each key's hash and shard, the shards
// involved locked in index order (so that batches never deadlock) until the object
// goes, and the batch's time raised to the latest any of them has decided at (the
// store's time never goes back). A batch of one key, the common case, locks one
// shard without sorting.
class LockedShards {
 public:
  LockedShards(std::vector<Shard>& shards, std::span<const StoreCheck> checks, Micros* now)
      : shards_(shards), n_(checks.size()) {
    const std::size_t mask = shards.size() - 1;
    for (std::size_t i = 0; i < n_; ++i) {
      hash[i] = HashKey(checks[i].key);
      shard[i] = memory_internal::ShardIndex(hash[i], mask + 1);
      order_[i] = shard[i];
    }
    if (n_ > 1) {
      std::sort(order_, order_ + n_);
      locked_ = static_cast<std::size_t>(std::unique(order_, order_ + n_) - order_);
    } else {
      locked_ = n_;
    }
    for (std::size_t i = 0; i < locked_; ++i) shards_[order_[i]].mu.lock();
    Micros t = *now;
    for (std::size_t i = 0; i < locked_; ++i) t = std::max(t, shards_[order_[i]].latest);
    for (std::size_t i = 0; i < locked_; ++i) {
      if (shards_[order_[i]].latest != t) shards_[order_[i]].latest = t;
    }
    *now = t;
  }
  ~LockedShards() {
    for (std::size_t i = locked_; i-- > 0;) shards_[order_[i]].mu.unlock();
  }
  LockedShards(const LockedShards&) = delete;
  LockedShards& operator=(const LockedShards&) = delete;

  // The distinct shards locked, in index order.
  std::size_t locked() const { return locked_; }
  Shard& locked_shard(std::size_t i) { return shards_[order_[i]]; }
  Table& table_of(std::size_t check) { return shards_[shard[check]].table; }
  Shard& shard_of(std::size_t check) { return shards_[shard[check]]; }

  std::uint64_t hash[kMaxBatch];
  std::size_t shard[kMaxBatch];

 private:
  std::vector<Shard>& shards_;
  std::size_t n_;
  std::size_t order_[kMaxBatch];
  std::size_t locked_ = 0;
};

}  // namespace sluice::memory_internal
