// MemoryStore's kDecide batches: the shards involved are locked for the whole batch,
// every check decided, then all are committed or none.
#include <algorithm>
#include <cstdint>

#include "memory/carry.h"
#include "memory/store_impl.h"

namespace sluice {

using memory_internal::CarryId;
using memory_internal::CarryOver;
using memory_internal::CleanState;
using memory_internal::Consumes;
using memory_internal::kCarryTag;
using memory_internal::kMaxBatch;
using memory_internal::LogBuffer;
using memory_internal::MarkCarry;
using memory_internal::RingLog;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::Table;
using memory_internal::TagOf;

// What a batch has decided, before it commits. Filled for the checks that use it:
// left uninitialised, not zeroed per call.
struct MemoryStore::Impl::Pending {
  Pending() {}
  Slot* slots[kMaxBatch];
  union {
    State next[kMaxBatch];
  };
  Micros expires[kMaxBatch];
  bool all_allowed = true;
  bool consumes = false;
  // A check (cost > 0) of a policy whose overage is not kReject is in the batch.
  bool overage = false;
  // Carry-over: the id of each check's parameters when its policy records them (0
  // otherwise), and whether a state was taken as fresh because of a change.
  std::uint32_t carry_id[kMaxBatch];
  bool carried_fresh[kMaxBatch];
  // Set once anything may have moved slots (erase, sweep, insert): found slot
  // pointers must then be looked up again.
  bool moved = false;
};

Status MemoryStore::Impl::Decide(std::span<const StoreCheck> checks, Micros now,
                                 std::span<Decision> out) {
  LockedShards locks(shards, checks, &now);
  Pending pending;
  DecideChecks(locks, checks, now, pending, out);
  if (!pending.all_allowed || !pending.consumes) {
    StartBuckets(locks, checks, now, pending);
    // Overage (Policy::overage): a denied batch's charging checks take per their rule.
    if (!pending.all_allowed && pending.overage) return ChargeOverage(locks, checks, now, out);
    return Status::Ok();
  }
  return Commit(locks, checks, now, pending);
}

bool MemoryStore::Impl::NormaliseWord(const Policy& p, const Slot* s, Micros now,
                                      std::uint32_t carry_id, State* in) {
  if (s == nullptr || s->expires <= now) {
    *in = State{};
    return true;
  }
  *in = s->state;
  if ((s->tag & kCarryTag) == 0) return false;
  // Written with its parameters: carried over when they are not p's.
  *in = CleanState(p.algorithm, s->state);
  const std::uint32_t was = CarryId(p.algorithm, s->state);
  // Fresh when carried over as a reset, across a window change, or to a bucket new again
  // under p: a token bucket then starts like a new one (core/token_bucket.cc).
  return was != carry_id &&
         (!CarryOver(p, carry_params, was, now, in) ||
          (p.algorithm == Algorithm::kTokenBucket && p.on_change != OnChange::kAsIs &&
           core::TokenBucketIsNew(p, in->word.bucket, now)));
}

void MemoryStore::Impl::DecideChecks(LockedShards& locks, std::span<const StoreCheck> checks,
                                     Micros now, Pending& pending, std::span<Decision> out) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    pending.carry_id[i] = p.on_change != OnChange::kAsIs ? carry_params.Id(p) : 0;
    pending.carried_fresh[i] = false;
    Slot* s = FindFor(table, locks.hash[i], c.key, p.algorithm, &pending.moved);
    pending.slots[i] = s;
    if (p.algorithm == Algorithm::kConcurrency) {
      // --- concurrency limits (issue #12 item 1) ---
      // An acquire is decided now and committed with the batch.
      core::PermitId id;
      (void)core::ParsePermitId(c.permit, &id);  // validated above (empty for a peek)
      core::PermitSet none;
      out[i] = core::Concurrency(p, s != nullptr ? *s->state.permits : none, now, id, c.cost,
                                 /*commit=*/false, &pending.expires[i]);
    } else if (p.algorithm == Algorithm::kSlidingWindowLog) {
      if (s == nullptr) {
        // Decide against an empty log on the stack; the commit creates the real one.
        LogBuffer empty;
        LogBuffer* scratch = LogBuffer::Init(&empty, 1);
        RingLog log(&scratch, 1);
        out[i] = core::SlidingWindowLog(p, log, now, c.cost, /*commit=*/false, &pending.expires[i]);
      } else {
        RingLog log(&s->state.log, p.limit);
        out[i] = core::SlidingWindowLog(p, log, now, c.cost, /*commit=*/false, &pending.expires[i]);
      }
    } else {
      State in;
      bool fresh = NormaliseWord(p, s, now, pending.carry_id[i], &in);
      pending.carried_fresh[i] = fresh && s != nullptr && s->expires > now;
      out[i] = core::WordOpsOf(p.algorithm)
                   ->decide(p, in.word, fresh, now, c.cost, &pending.next[i].word,
                            &pending.expires[i], c.max_wait);
    }
    if (p.overage != Overage::kReject && c.cost > 0) [[unlikely]] {
      // A cost above the capacity (a usage report) never fits: denied, then charged.
      if (c.cost > p.Capacity()) out[i].allowed = false;
      pending.overage = true;
    }
    // Blocks (Policy::block_for): a blocked key is denied; a denial by the policy
    // itself (not during a block, and not a peek) starts a block.
    if (p.block_for > 0) [[unlikely]] {
      pending.moved = ApplyBlocks(locks.shard_of(i), c, now, c.cost > 0, &out[i]) || pending.moved;
    }
    pending.all_allowed = pending.all_allowed && out[i].allowed;
    pending.consumes = pending.consumes || c.cost > 0;
  }
}

// A token bucket with initial_tokens below its capacity starts at its first request,
// allowed or not (core/token_bucket.cc), so that it refills from then on.
void MemoryStore::Impl::StartBuckets(LockedShards& locks, std::span<const StoreCheck> checks,
                                     Micros now, const Pending& pending) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    if (p.algorithm != Algorithm::kTokenBucket || c.cost == 0 ||
        !core::TokenBucketStartsOnDenial(p)) {
      continue;
    }
    Shard& shard = locks.shard_of(i);
    Slot* s = shard.table.Find(locks.hash[i], c.key);
    if (s != nullptr && s->expires > now && !pending.carried_fresh[i]) continue;  // started already
    if (s == nullptr) {
      // At the key cap the bucket is not started: the request was denied anyway,
      // and the next one starts it.
      if (!Reserve(shard, now)) continue;
      s = shard.table.Insert(locks.hash[i], c.key, p.algorithm);
    }
    core::TokenBucketStart(p, now, &s->state.word.bucket, &s->expires);
    MarkCarry(s, p.algorithm, pending.carry_id[i]);
    shard.table.NoteExpiry(s->expires);
  }
}

Status MemoryStore::Impl::Commit(LockedShards& locks, std::span<const StoreCheck> checks,
                                 Micros now, Pending& pending) {
  // Commit: reserve room for missing keys first (may hit the cap: then nothing is
  // consumed, and the reservations are returned). A known key that has expired may
  // be dropped by a reserving sweep and inserted again, so it reserves room too.
  bool needs_room[kMaxBatch];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    needs_room[i] =
        Consumes(checks[i]) && (pending.slots[i] == nullptr || pending.slots[i]->expires <= now);
  }
  std::size_t reserved = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (!needs_room[i]) continue;
    Shard& shard = locks.shard_of(i);
    pending.moved = true;  // Reserve may sweep
    if (!ReserveFor(shard, now, &reserved)) return Full();
  }
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    if (!Consumes(c)) continue;
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    // The common case (every key known) reuses the slots found above.
    Slot* s = pending.moved ? table.Find(locks.hash[i], c.key) : pending.slots[i];
    if (s == nullptr) {
      s = table.Insert(locks.hash[i], c.key, p.algorithm);
      pending.moved = true;  // a growing table moves every slot
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        s->state.log =
            LogBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
      }
      if (p.algorithm == Algorithm::kConcurrency) {
        s->state.permits = new core::PermitSet();
      }
      ++inserts;
    }
    if (p.algorithm == Algorithm::kConcurrency) {
      core::PermitId id;
      (void)core::ParsePermitId(c.permit, &id);
      core::ConcurrencyCommit(p, *s->state.permits, now, id, &s->expires);
    } else if (p.algorithm == Algorithm::kSlidingWindowLog) {
      RingLog log(&s->state.log, p.limit);
      core::SlidingWindowLogCommit(p, log, now, c.cost, &s->expires);
    } else {
      s->state = pending.next[i];
      s->expires = pending.expires[i];
      MarkCarry(s, p.algorithm, pending.carry_id[i]);
    }
    table.NoteExpiry(s->expires);
  }
  // Return the reservations not used (an expired key that was not swept, or a key
  // that came twice in the batch). Every insert had one.
  if (reserved > inserts) total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  // Incremental expiry, paid by inserts only: the sweep hand walks the whole table, so
  // each step is a cache miss that a decision on a known key should not pay. Tables
  // only grow through inserts, and each insert examines 4 slots, so idle keys are
  // reclaimed faster than new ones arrive. (At the key cap, Reserve sweeps fully.)
  // Every slot of this batch now expires after `now`, so this cannot remove one.
  for (std::size_t i = 0; inserts > 0 && i < locks.locked(); ++i) {
    const std::size_t removed = locks.locked_shard(i).table.SweepSome(now, 4);
    if (removed > 0) {
      total.fetch_sub(removed, std::memory_order_relaxed);
      expired.fetch_add(removed, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

}  // namespace sluice
