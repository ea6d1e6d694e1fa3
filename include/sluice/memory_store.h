// sluice/memory_store.h: the in-process store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sluice/store.h"

namespace sluice {

namespace memory_internal {
struct Access;
}  // namespace memory_internal

struct MemoryStoreOptions {
  // Hard cap on live keys, so that a flood of unique keys cannot exhaust memory.
  // When it is reached, expired keys are swept; if none can be freed, a check on a
  // key the store does not know fails with kResourceExhausted (the Limiter then
  // applies the policy's FailureMode). Keys already tracked are never evicted to
  // make room, so a limited key is never handed a fresh budget. A block (Policy::
  // block_for) counts as a key while it lasts; at the cap a denial starts no block.
  std::size_t max_keys = std::size_t{1} << 22;
  // Number of independently locked shards (rounded up to a power of two, at least 1).
  std::size_t shards = 16;
};

// Counters for tests and operators.
struct MemoryStoreStats {
  // Live keys (expired ones not yet swept included), plus one per block being kept
  // (Policy::block_for: a blocked key's block is kept apart from its state).
  std::size_t keys = 0;
  std::uint64_t rejected_full = 0;  // checks refused because the key cap was reached
  std::uint64_t expired = 0;        // keys dropped because their state was back to full
};

// Thread-safe, sharded, in-process state. A key's state is a few machine words (a
// sliding window log also keeps one timestamp per unit in its window). An idle key is
// dropped once its state would be back to "full", which changes no decision: the
// store's time never goes back (a check stamped earlier than the latest time its
// shard has decided at is decided at that latest time), so a dropped state is never
// needed again. Deciding
// on a key the store already holds allocates nothing, but for a concurrency limit's
// acquire (its permit's entries in the key's index by id and by expiry, so that every
// permit operation costs O(log held)).
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // Store's contract; every operation of StoreOp. Thread-safe.
  Status Run(const StoreBatch& batch, std::span<Decision> out) override;
  Status Reset(const Policy& policy, std::string_view key) override;
  // Itself: the decision layer's in-process fast path.
  Store* InProcess() override;
  Status RunOne(const StoreCheck& check, const Clock& clock, Decision* out) override;

  MemoryStoreStats Stats() const;

  // Drops every key whose state is back to "full" at `now` (a clock reading of the
  // store's callers), one shard at a time, and returns how many. Idle keys are otherwise
  // dropped a few at a time by inserts, or all at once at the key cap, so without
  // inserts Stats().keys keeps counting them. Changes no decision.
  std::size_t SweepExpired(Micros now);

 private:
  friend struct memory_internal::Access;  // the Limiter's one-check fast path
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
