// MemoryStore's kRefund batches.
#include "memory/store_impl.h"
#include "memory/word_ops.h"

namespace sluice {

using memory_internal::kCarryTag;
using memory_internal::LogBuffer;
using memory_internal::PermitBuffer;
using memory_internal::RefundSlot;
using memory_internal::RingLog;
using memory_internal::RingPermits;
using memory_internal::Slot;
using memory_internal::State;
using memory_internal::Table;
using memory_internal::TagOf;

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
