// MemoryStore's kPenalize batches and overage charges (forced consumption, bounded).
#include <algorithm>

#include "memory/store_impl.h"

namespace sluice {

using memory_internal::LogBuffer;
using memory_internal::RingLog;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::Table;
using memory_internal::TagOf;

// Applies check `i` by force (its slot reserved by the caller when it has none): a
// penalty (bounded at core::PenaltyBound) or, `overage`, a denied check's overage
// charge (core::OverageBound); `*out` is the peek at the state after it, with the
// units taken in `charged`. Returns true when it inserted a slot.
bool MemoryStore::Impl::Force(LockedShards& locks, std::size_t i, const StoreCheck& c, Micros now,
                              bool overage, Decision* out) {
  const Policy& p = *c.policy;
  Table& table = locks.table_of(i);
  Slot* s = table.Find(locks.hash[i], c.key);
  // Normalised as a decision reads it (a state written under other parameters is
  // carried over per on_change, as Lua's FORCE does through DECIDE), then forced.
  State in;
  const bool fresh =
      p.algorithm == Algorithm::kSlidingWindowLog ||
      NormaliseWord(p, s, now, p.on_change != OnChange::kAsIs ? carry_params.Id(p) : 0, &in);
  const bool inserted = s == nullptr;
  if (inserted) {
    s = table.Insert(locks.hash[i], c.key, p.algorithm);
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      s->state.log =
          LogBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
    }
  }
  if (p.algorithm == Algorithm::kSlidingWindowLog) {
    RingLog log(&s->state.log, p.limit);
    const std::uint64_t bound = overage ? core::OverageBound(p) : core::PenaltyBound(p);
    *out = core::SlidingWindowLogCharge(p, log, now, c.cost, bound, &s->expires);
  } else {
    const core::WordOps& ops = *core::WordOpsOf(p.algorithm);
    *out = (overage ? ops.charge : ops.penalize)(p, in.word, fresh, now, c.cost, &s->state.word,
                                                 &s->expires);
    s->tag = TagOf(p.algorithm);  // written back plain (no record), as Lua's FORCE writes it
  }
  table.NoteExpiry(s->expires);
  return inserted;
}

// Room for the keys of `checks` that `apply` selects and that need a slot (as a
// decision's commit): a key of another algorithm is dropped first, its state means
// nothing here. False (nothing reserved) at the key cap.
template <typename Apply>
bool MemoryStore::Impl::ReserveForced(LockedShards& locks, std::span<const StoreCheck> checks,
                                      Micros now, Apply apply, std::size_t* reserved) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    if (!apply(i)) continue;
    bool dropped = false;
    const Slot* s = FindFor(locks.table_of(i), locks.hash[i], c.key, c.policy->algorithm, &dropped);
    if (s != nullptr && s->expires > now) continue;
    if (!ReserveFor(locks.shard_of(i), now, reserved)) return false;
  }
  return true;
}

// Penalties (StoreOp::kPenalize): every check's cost is consumed whatever the
// decision (bounded, core/penalties.cc), and its decision is a peek at the state after;
// a key left over its limit starts its block (Policy::block_for) unless it is blocked.
// All checks are applied, or none (the key cap).
Status MemoryStore::Impl::Penalize(std::span<const StoreCheck> checks, Micros now,
                                   std::span<Decision> out) {
  LockedShards locks(shards, checks, &now);
  std::size_t reserved = 0;
  if (!ReserveForced(
          locks, checks, now, [](std::size_t) { return true; }, &reserved)) {
    return Full();
  }
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (Force(locks, i, checks[i], now, /*overage=*/false, &out[i])) ++inserts;
    if (checks[i].policy->block_for > 0) {
      (void)ApplyBlocks(locks.shard_of(i), checks[i], now, true, &out[i]);
    }
  }
  if (reserved > inserts) total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  return Status::Ok();
}

// Overage (Policy::overage): a denied batch's checks whose policy charges (cost > 0)
// take their cost per their overage, each answered with the peek after its charge,
// denied; a blocked key stays blocked. Every such check is charged, or none (the key cap).
Status MemoryStore::Impl::ChargeOverage(LockedShards& locks, std::span<const StoreCheck> checks,
                                        Micros now, std::span<Decision> out) {
  auto charges = [&](std::size_t i) {
    return checks[i].cost > 0 && checks[i].policy->overage != Overage::kReject;
  };
  std::size_t reserved = 0;
  if (!ReserveForced(locks, checks, now, charges, &reserved)) return Full();
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (!charges(i)) continue;
    if (Force(locks, i, checks[i], now, /*overage=*/true, &out[i])) ++inserts;
    out[i].allowed = false;
    if (checks[i].policy->block_for > 0) {
      (void)ApplyBlocks(locks.shard_of(i), checks[i], now, false, &out[i]);
    }
  }
  if (reserved > inserts) total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace sluice
