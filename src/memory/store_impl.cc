#include "memory/store_impl.h"

#include <string>

namespace sluice {

bool MemoryStore::Impl::Reserve(Shard& shard, Micros now) {
  std::size_t n = total.load(std::memory_order_relaxed);
  for (;;) {
    if (n < options.max_keys) {
      if (total.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
      continue;  // `n` was reloaded
    }
    if (shard.table.next_expiry() > now) return false;
    const std::size_t removed = shard.table.Sweep(now);
    if (removed == 0) return false;
    total.fetch_sub(removed, std::memory_order_relaxed);
    expired.fetch_add(removed, std::memory_order_relaxed);
    n = total.load(std::memory_order_relaxed);
  }
}

bool MemoryStore::Impl::ApplyBlocks(Shard& shard, const StoreCheck& c, Micros now, bool starts,
                                    Decision* d) {
  std::size_t dropped = 0;
  const Micros left =
      shard.blocks != nullptr ? shard.blocks->Left(c.key, now, &dropped) : Micros{0};
  if (dropped > 0) total.fetch_sub(dropped, std::memory_order_relaxed);
  if (left > 0) {
    core::ApplyBlock(d, left);
    return false;
  }
  if (!starts || d->allowed) return false;
  if (!Reserve(shard, now)) {
    rejected_full.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (shard.blocks == nullptr) shard.blocks = new memory_internal::BlockTable();
  const Micros until = now + c.policy->block_for;
  const std::size_t swept = shard.blocks->Start(c.key, until, now);
  if (swept > 0) total.fetch_sub(swept, std::memory_order_relaxed);
  core::ApplyBlock(d, c.policy->block_for);
  return true;
}

bool MemoryStore::Impl::ReserveFor(Shard& shard, Micros now, std::size_t* reserved) {
  if (Reserve(shard, now)) {
    ++*reserved;
    return true;
  }
  total.fetch_sub(*reserved, std::memory_order_relaxed);
  *reserved = 0;
  return false;
}

memory_internal::Slot* MemoryStore::Impl::FindFor(memory_internal::Table& table, std::uint64_t hash,
                                                  std::string_view key, Algorithm a,
                                                  bool* dropped) {
  memory_internal::Slot* s = table.Find(hash, key);
  if (s == nullptr || (s->tag & ~memory_internal::kCarryTag) == memory_internal::TagOf(a)) {
    return s;
  }
  table.EraseSlot(s);
  total.fetch_sub(1, std::memory_order_relaxed);
  *dropped = true;
  return nullptr;
}

Status MemoryStore::Impl::Full() {
  rejected_full.fetch_add(1, std::memory_order_relaxed);
  return Status::ResourceExhausted("in-process store is full (" + std::to_string(options.max_keys) +
                                   " keys)");
}

}  // namespace sluice
