// Internal: MemoryStore's hashing and placement functions, exposed for unit tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::memory_internal {

// 64-bit hash of a store key (FNV-1a over words, splitmix64 finaliser).
std::uint64_t HashKey(std::string_view key);

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
