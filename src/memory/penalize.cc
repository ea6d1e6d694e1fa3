// MemoryStore's kPenalize batches.
#include "memory/carry.h"
#include "memory/store_impl.h"

namespace sluice {

using memory_internal::CarryId;
using memory_internal::CleanState;
using memory_internal::kCarryTag;
using memory_internal::LogBuffer;
using memory_internal::RingLog;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::Table;
using memory_internal::TagOf;

// Penalties (StoreCheck::force): every check's cost is consumed whatever the
// decision (bounded, core/penalties.cc), and its decision is a peek at the state after;
// a key left over its limit starts its block (Policy::block_for) unless it is blocked.
// All checks are applied, or none (the key cap).
Status MemoryStore::Impl::Penalize(std::span<const StoreCheck> checks, Micros now,
                                   std::span<Decision> out) {
  LockedShards locks(shards, checks, &now);
  // Room for the keys that need a slot (as EvaluateBatch's commit): a key of another
  // algorithm is dropped first, its state means nothing here.
  std::size_t reserved = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    Table& table = locks.table_of(i);
    bool dropped = false;
    const Slot* s = FindFor(table, locks.hash[i], c.key, c.policy->algorithm, &dropped);
    if (s != nullptr && s->expires > now) continue;
    if (!ReserveFor(locks.shard_of(i), now, &reserved)) return Full();
  }
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    bool fresh = s == nullptr || s->expires <= now;
    State in = s != nullptr ? s->state : State{};
    if (!fresh && (s->tag & kCarryTag) != 0) {
      // Written with the parameters it was written under (on_change): its usage counts
      // when they are p's own, else the state is fresh, as Lua's load() reads it.
      fresh = CarryId(p.algorithm, s->state) != carry_params.Id(p);
      in = CleanState(p.algorithm, s->state);
    }
    if (s == nullptr) {
      s = table.Insert(locks.hash[i], c.key, p.algorithm);
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        s->state.log =
            LogBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
      }
      ++inserts;
    }
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      RingLog log(&s->state.log, p.limit);
      out[i] = core::SlidingWindowLogPenalize(p, log, now, c.cost, &s->expires);
    } else {
      out[i] = core::WordOpsOf(p.algorithm)
                   ->penalize(p, in.word, fresh, now, c.cost, &s->state.word, &s->expires);
      s->tag = TagOf(p.algorithm);  // written back plain (no record), as Lua's FORCE writes it
    }
    table.NoteExpiry(s->expires);
    if (p.block_for > 0) (void)ApplyBlocks(locks.shard_of(i), c, now, true, &out[i]);
  }
  if (reserved > inserts) total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace sluice
