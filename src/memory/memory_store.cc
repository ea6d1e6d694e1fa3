// MemoryStore: sharded open-addressing hash tables of 64-byte slots.
//
// A slot (one cache line) holds the key (inline up to 30 bytes, else on the heap),
// the algorithm's state (a few words; a pointer to a ring buffer for the sliding log)
// and the time at which that state is back to "full". Lookups of existing keys
// allocate nothing and, for inline keys, read one cache line of the table. Linear
// probing with backward-shift deletion (no tombstones); tables grow by 1.5x at 7/8
// load, so memory per key stays between 64/0.875 and 64/0.58 bytes.
//
// A Limiter's store key is "<prefix>:{<escaped caller key>}:<policy>": with the
// default prefix "sluice", 10 bytes + the policy name + the caller key. Keys longer
// than 30 bytes cost a heap block more, and a second cache miss per decision.
//
// Files, one idea each: key_hash.h (the key hash), slot.h (a slot), log_ring.h and
// core/permit_set.h (a sliding log's ring, a concurrency key's permits), slot_array.*
// (a table's memory, huge pages), table.* (one shard's hash table), shard_lock.h,
// block_table.h (blocks), shard.h (a shard, and the locking prologue of a batch),
// carry.* (carry-over records),
// store_impl.* (the store's state, key cap and blocks); the operations: this file (the
// entry point, the one-check fast path, reset, sweep), decide.cc, penalize.cc,
// refund.cc, permits.cc.
#include "sluice/memory_store.h"

#include <memory>
#include <new>
#include <type_traits>

#include "memory/memory_store_internal.h"
#include "memory/store_impl.h"

namespace sluice {

using memory_internal::HashKey;
using memory_internal::RingLog;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::TagOf;
using Shard = memory_internal::Shard;
using memory_internal::ShardLock;

MemoryStore::MemoryStore(MemoryStoreOptions options) : impl_(std::make_unique<Impl>(options)) {}
MemoryStore::~MemoryStore() = default;

namespace memory_internal {

Status Access::EvaluateOne(MemoryStore& store, const StoreCheck& c, std::uint64_t hash, Micros now,
                           Decision* out) {
  const Policy& p = *c.policy;
  if (p.algorithm != Algorithm::kConcurrency && p.block_for == 0 && p.overage == Overage::kReject &&
      p.on_change == OnChange::kAsIs) {
    // The common case, a live state (not back to full) of a word algorithm or a
    // sliding log: decided and committed under the shard lock with nothing else to do.
    // It is exactly what the batch path below does for such a check (no reservation,
    // insert or sweep). (A policy with a carry-over mode records its parameters: the
    // batch path.)
    Shard& shard = store.impl_->shards[ShardIndex(hash, store.impl_->shards.size())];
    std::lock_guard<ShardLock> lock(shard.mu);
    Micros t = now;
    if (shard.latest > t) {
      t = shard.latest;
    } else if (shard.latest != t) {
      shard.latest = t;
    }
    Slot* s = shard.table.Find(hash, c.key);
    if (s != nullptr && s->tag == TagOf(p.algorithm) && s->expires > t) {
      Micros expires;
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        RingLog log(&s->state.log, p.limit);
        new (out) Decision(core::SlidingWindowLog(p, log, t, c.cost, /*commit=*/true, &expires));
        if (out->allowed && c.cost > 0) {
          s->expires = expires;
          shard.table.NoteExpiry(expires);
        }
        return Status::Ok();
      }
      State next;
      static_assert(std::is_trivially_destructible_v<Decision>, "built over the old one");
      // The algorithm writes its decision straight into *out (placement new: the call's
      // result initialises it, no temporary). Copied from a temporary, the decision
      // was read back with 16-byte loads right after the algorithm's narrower stores,
      // loads the CPU cannot forward from its store buffer (docs/benchmarks.md,
      // "store-forwarding stalls").
      new (out) Decision(core::WordOpsOf(p.algorithm)
                             ->decide(p, s->state.word, /*fresh=*/false, t, c.cost, &next.word,
                                      &expires, c.max_wait));
      if (out->allowed && c.cost > 0) {
        s->state = next;
        s->expires = expires;
        shard.table.NoteExpiry(expires);
      }
      return Status::Ok();
    }
  }
  return EvaluateBatch(store, std::span<const StoreCheck>(&c, 1), now, std::span<Decision>(out, 1));
}

Status Access::EvaluateBatch(MemoryStore& store, std::span<const StoreCheck> checks, Micros now,
                             std::span<Decision> out) {
  return store.impl_->Decide(checks, now, out);
}

Status Access::PenalizeBatch(MemoryStore& store, std::span<const StoreCheck> checks, Micros now,
                             std::span<Decision> out) {
  return store.impl_->Penalize(checks, now, out);
}

Status Access::PermitBatch(MemoryStore& store, bool extend, std::span<const StoreCheck> checks,
                           Micros now, std::span<Decision> out) {
  return store.impl_->Permits(extend, checks, now, out);
}

}  // namespace memory_internal

Status MemoryStore::Run(const StoreBatch& batch, std::span<Decision> out) {
  if (Status v = ValidateBatch(batch); !v.ok()) return v;
  const std::span<const StoreCheck> checks = batch.checks;
  if (checks.empty()) return Status::Ok();
  if (batch.op != StoreOp::kRefund && out.size() < checks.size()) {
    return Status::InvalidArgument("output span too small");
  }
  using memory_internal::Access;
  switch (batch.op) {
    case StoreOp::kDecide: {
      Status s = checks.size() == 1 ? Access::EvaluateOne(*this, checks[0], HashKey(checks[0].key),
                                                          batch.now, &out[0])
                                    : Access::EvaluateBatch(*this, checks, batch.now, out);
      bool usage = false;  // (usage reservations: StoreCheck::usage_id)
      for (const StoreCheck& c : checks) usage = usage || !c.usage_id.empty();
      if (!s.ok() || !usage) return s;
      return impl_->RecordUsage(checks, batch.now, out);
    }
    case StoreOp::kRefund:
      return impl_->Refund(checks, batch.now);
    case StoreOp::kPenalize:
      return Access::PenalizeBatch(*this, checks, batch.now, out);
    case StoreOp::kRelease:
    case StoreOp::kExtend:
      return Access::PermitBatch(*this, batch.op == StoreOp::kExtend, checks, batch.now, out);
    case StoreOp::kSettle:
      return impl_->Settle(checks, batch.now, out);
  }
  return Status::InvalidArgument("unknown store operation");
}

Store* MemoryStore::InProcess() {
  return this;
}

Status MemoryStore::RunOne(const StoreCheck& check, const Clock& clock, Decision* out) {
  if (!check.usage_id.empty()) return Store::RunOne(check, clock, out);  // recorded: Run's path
  // The key is hashed once, and its home slot starts loading before the clock is read.
  const std::uint64_t h = HashKey(check.key);
  impl_->shards[impl_->ShardOf(h)].table.Prefetch(h);
  const Micros now = clock.Now();
  if (Status v = ValidateBatch(StoreBatch{.checks = std::span<const StoreCheck>(&check, 1)});
      !v.ok()) {
    return v;
  }
  return memory_internal::Access::EvaluateOne(*this, check, h, now, out);
}

Status MemoryStore::Reset(const Policy& policy, std::string_view key) {
  (void)policy;
  const std::uint64_t h = HashKey(key);
  Shard& shard = impl_->shards[impl_->ShardOf(h)];
  std::lock_guard<ShardLock> lock(shard.mu);
  if (Slot* s = shard.table.Find(h, key)) {
    shard.table.EraseSlot(s);
    impl_->total.fetch_sub(1, std::memory_order_relaxed);
  }
  if (shard.blocks != nullptr && shard.blocks->Erase(key) > 0) {  // Reset ends a block too
    impl_->total.fetch_sub(1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

std::size_t MemoryStore::SweepExpired(Micros now) {
  std::size_t removed = 0;
  for (Shard& shard : impl_->shards) {
    std::lock_guard<ShardLock> lock(shard.mu);
    if (shard.table.next_expiry() > now) continue;  // nothing there can have expired
    const std::size_t n = shard.table.Sweep(now);
    impl_->total.fetch_sub(n, std::memory_order_relaxed);
    impl_->expired.fetch_add(n, std::memory_order_relaxed);
    removed += n;
  }
  return removed;
}

MemoryStoreStats MemoryStore::Stats() const {
  MemoryStoreStats s;
  s.keys = impl_->total.load(std::memory_order_relaxed);
  s.rejected_full = impl_->rejected_full.load(std::memory_order_relaxed);
  s.expired = impl_->expired.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice
