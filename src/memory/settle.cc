// MemoryStore's usage reservations: the records a kDecide with usage ids writes, and
// kSettle batches (sluice/store.h; memory/usage.h keeps the records).
#include <string>

#include "memory/store_impl.h"

namespace sluice {

using memory_internal::UsageTable;

Status MemoryStore::Impl::RecordUsage(std::span<const StoreCheck> checks, Micros now,
                                      std::span<const Decision> decided) {
  bool all = true;
  for (std::size_t i = 0; i < checks.size(); ++i) all = all && decided[i].allowed;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    if (c.usage_id.empty()) continue;
    // What the check took: its cost when the batch allowed, else what its overage charged.
    const std::uint64_t taken = all ? c.cost : decided[i].charged;
    if (!usage.Record(c.key, c.usage_id, taken, now + c.usage_ttl, now)) {
      rejected_full.fetch_add(1, std::memory_order_relaxed);
      return Status::ResourceExhausted("in-process store is full of usage reservations (" +
                                       std::to_string(options.max_keys) + ")");
    }
  }
  return Status::Ok();
}

// Each check on its own, at the key's current state: below what its reservation took,
// the difference is refunded; above it, the difference is decided (and charged per the
// policy's overage when it does not fit). The records are claimed (marked settled)
// first, so a concurrent or retried settle of the same id finds them settled.
Status MemoryStore::Impl::Settle(std::span<const StoreCheck> checks, Micros now,
                                 std::span<Decision> out) {
  std::string_view keys[kMaxBatchChecks];
  std::string_view ids[kMaxBatchChecks];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    keys[i] = checks[i].key;
    ids[i] = checks[i].usage_id;
  }
  UsageTable::Claim claims[kMaxBatchChecks];
  std::size_t missing = 0;
  if (!usage.ClaimAll(keys, ids, checks.size(), now, claims, &missing)) {
    return Status::NotFound("usage reservation '" + std::string(ids[missing]) + "' of policy '" +
                            checks[missing].policy->name +
                            "' is unknown or expired (nothing was settled)");
  }
  for (std::size_t i = 0; i < checks.size(); ++i) {
    StoreCheck c = checks[i];
    c.usage_id = {};
    const std::span<const StoreCheck> one(&c, 1);
    const std::span<Decision> d = out.subspan(i, 1);
    const std::uint64_t taken = claims[i].taken;
    const bool open = claims[i].found == UsageTable::Found::kOpen;
    if (open && checks[i].cost > taken) {
      c.cost = checks[i].cost - taken;  // the rest: decided, charged per overage if it does not fit
      if (Status s = Decide(one, now, d); !s.ok()) return s;
    } else {
      if (open && checks[i].cost < taken) {
        c.cost = taken - checks[i].cost;
        if (Status s = Refund(one, now); !s.ok()) return s;
      }
      c.cost = 0;  // the key after it, as a peek
      if (Status s = Decide(one, now, d); !s.ok()) return s;
      d[0].charged = 0;
    }
    d[0].allowed = open;
  }
  return Status::Ok();
}

}  // namespace sluice
