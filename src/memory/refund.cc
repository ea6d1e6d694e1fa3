// MemoryStore's kRefund batches.
#include "memory/carry.h"
#include "memory/store_impl.h"

namespace sluice {

using memory_internal::CarryId;
using memory_internal::CleanState;
using memory_internal::kCarryTag;
using memory_internal::LogBuffer;
using memory_internal::RingLog;
using memory_internal::SetCarryId;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::Table;
using memory_internal::TagOf;

namespace {

// Refunds `cost` to the state in `s` (an existing slot of p's algorithm). A word
// state back to full (expires <= now) is fresh: nothing to give back.
// A carry slot (kCarryTag) is refunded only when it records `carry_id`, p's own
// parameters (0: p's are not registered): a state written under others gives nothing
// back; it keeps its id.
void RefundSlot(const Policy& p, Slot* s, Micros now, std::uint64_t cost, std::uint32_t carry_id) {
  if (p.algorithm == Algorithm::kConcurrency) return;  // permits are released, not refunded
  if (p.algorithm == Algorithm::kSlidingWindowLog) {
    RingLog log(&s->state.log, p.limit);
    core::SlidingWindowLogRefund(p, log, now, cost, &s->expires);
    return;
  }
  if (s->expires <= now) return;
  const bool carry = (s->tag & kCarryTag) != 0;
  if (carry && (carry_id == 0 || CarryId(p.algorithm, s->state) != carry_id)) return;
  const State in = carry ? CleanState(p.algorithm, s->state) : s->state;
  core::WordOpsOf(p.algorithm)->refund(p, in.word, now, cost, &s->state.word, &s->expires);
  if (carry) SetCarryId(p.algorithm, s->state, carry_id);
}

}  // namespace

// Refunds (validated: applied to every check or to none).
Status MemoryStore::Impl::Refund(std::span<const StoreCheck> checks, Micros now) {
  // Same prologue (and time rule) as a decision.
  LockedShards locks(shards, checks, &now);
  // Refunds insert and erase nothing, so slots found stay where they are.
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    // No state, or another algorithm's: nothing of this policy to give back.
    if (s == nullptr || (s->tag & ~kCarryTag) != TagOf(c.policy->algorithm)) continue;
    const std::uint32_t own =
        (s->tag & kCarryTag) != 0 ? carry_params.Id(*c.policy) : std::uint32_t{0};
    RefundSlot(*c.policy, s, now, c.cost, own);
    table.NoteExpiry(s->expires);
  }
  return Status::Ok();
}

}  // namespace sluice
