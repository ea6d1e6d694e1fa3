// MemoryStore's kRelease and kExtend batches (concurrency limits).
#include "memory/store_impl.h"

namespace sluice {

using memory_internal::Slot;
using memory_internal::Table;

// Release and extend (concurrency checks, validated): each applied on its own.
Status MemoryStore::Impl::Permits(bool extend, std::span<const StoreCheck> checks, Micros now,
                                  std::span<Decision> out) {
  LockedShards locks(shards, checks, &now);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    bool dropped = false;
    Slot* s = FindFor(table, locks.hash[i], c.key, p.algorithm, &dropped);
    core::PermitId id;
    (void)core::ParsePermitId(c.permit, &id);  // validated
    Micros expires = 0;
    core::PermitSet none;
    core::PermitSet& set = s != nullptr ? *s->state.permits : none;
    out[i] = extend ? core::ConcurrencyExtend(p, set, now, id, &expires)
                    : core::ConcurrencyRelease(p, set, now, id, &expires);
    if (s != nullptr) {
      s->expires = expires;
      table.NoteExpiry(s->expires);
    }
  }
  return Status::Ok();
}

}  // namespace sluice
