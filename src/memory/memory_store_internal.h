// Internal: MemoryStore's hashing and placement functions, exposed for unit tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "memory/key_hash.h"
#include "sluice/memory_store.h"

namespace sluice::memory_internal {

// MemoryStore::Run's paths into the store's internals.
struct Access {
  // A one-check kDecide batch (validated), `hash` being HashKey(check.key). A live word
  // state or sliding log is decided in place under its shard lock; anything else
  // (permits, blocks, overage, carry-over, a new or expired key) takes EvaluateBatch,
  // which hashes the key itself.
  static Status EvaluateOne(MemoryStore& store, const StoreCheck& check, std::uint64_t hash,
                            Micros now, Decision* out);
  // The general path of a kDecide batch (validated arguments).
  static Status EvaluateBatch(MemoryStore& store, std::span<const StoreCheck> checks, Micros now,
                              std::span<Decision> out);
  // A kPenalize batch, validated arguments.
  static Status PenalizeBatch(MemoryStore& store, std::span<const StoreCheck> checks, Micros now,
                              std::span<Decision> out);
  // A kRelease (extend false) or kExtend batch, validated arguments.
  static Status PermitBatch(MemoryStore& store, bool extend, std::span<const StoreCheck> checks,
                            Micros now, std::span<Decision> out);
};

// HashKey(key): memory/key_hash.h.

// The shard of `hash` among `shards` (a power of two). Uses low bits of the hash (above
// bit 0), so that it is independent of HomeSlot, which uses the high bits: were both
// taken from the same bits, all keys of a shard would share a small range of home
// slots and probe sequences would grow with the shard's size.
inline std::size_t ShardIndex(std::uint64_t hash, std::size_t shards) {
  return static_cast<std::size_t>((hash >> 1) & (shards - 1));
}

// The preferred slot of `hash` in a table of `slots` slots (multiply-shift on the
// high bits).
inline std::size_t HomeSlot(std::uint64_t hash, std::size_t slots) {
  return static_cast<std::size_t>((static_cast<unsigned __int128>(hash) * slots) >> 64);
}

}  // namespace sluice::memory_internal
