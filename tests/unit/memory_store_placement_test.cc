// MemoryStore's placement: which shard and which home slot a key hashes to. Keys of
// one shard must still spread over all of that shard's table, or linear probing
// degrades to a scan of the shard (a decision took ~9 us with 1M keys before).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "memory/memory_store_internal.h"

namespace sluice::memory_internal {
namespace {

TEST(MemoryStorePlacement, KeysOfOneShardSpreadOverTheWholeTable) {
  constexpr std::size_t kShards = 64;
  constexpr std::size_t kSlots = 1024;
  std::set<std::size_t> homes;
  std::size_t in_shard = 0;
  for (int i = 0; i < 64 * 2000; ++i) {
    std::string key = "sluice:{user-";
    key += std::to_string(i);
    key += "}:api";
    const std::uint64_t h = HashKey(key);
    if (ShardIndex(h, kShards) != 3) continue;
    ++in_shard;
    homes.insert(HomeSlot(h, kSlots));
  }
  ASSERT_GT(in_shard, 1000u);
  // ~2000 keys thrown into 1024 slots cover about 86% of them.
  EXPECT_GT(homes.size(), kSlots * 3 / 4);
}

TEST(MemoryStorePlacement, EveryShardIsUsed) {
  constexpr std::size_t kShards = 64;
  std::set<std::size_t> shards;
  for (int i = 0; i < 10000; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    shards.insert(ShardIndex(HashKey(key), kShards));
  }
  EXPECT_EQ(shards.size(), kShards);
}

TEST(MemoryStorePlacement, HashDependsOnEveryByteAndTheLength) {
  const std::string base = "sluice:{0123456789abcdef0123}:policy";
  const std::uint64_t h = HashKey(base);
  for (std::size_t i = 0; i < base.size(); ++i) {
    std::string k = base;
    k[i] ^= 1;
    EXPECT_NE(HashKey(k), h) << "byte " << i;
  }
  EXPECT_NE(HashKey(std::string_view("ab\0", 3)), HashKey("ab"));
}

}  // namespace
}  // namespace sluice::memory_internal
