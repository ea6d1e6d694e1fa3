// Blocks (Policy::block_for) of one shard's keys.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "sluice/clock.h"

namespace sluice::memory_internal {

// Blocks (Policy::block_for) of one shard's keys: block-until by store key. Apart from
// the slots, so that a slot stays one cache line for the many keys that are never
// blocked; a shard allocates it at its first block. Expired blocks are dropped when
// met, and all of them whenever the map has doubled since the last sweep. Each entry
// counts as a key against MemoryStoreOptions::max_keys: the functions that add or drop
// entries say how many, for the store's count.
class BlockTable {
 public:
  // Microseconds left of the block of `key` at `now`; 0 when not blocked. An expired
  // entry is dropped (*dropped = 1).
  Micros Left(std::string_view key, Micros now, std::size_t* dropped) {
    *dropped = 0;
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return 0;
    if (it->second > now) return it->second - now;
    blocks_.erase(it);
    *dropped = 1;
    return 0;
  }
  // Records a block of `key` (not blocked: Left said 0) until `until`. Returns the
  // expired entries swept to make room.
  std::size_t Start(std::string_view key, Micros until, Micros now) {
    std::size_t swept = 0;
    if (blocks_.size() >= sweep_at_) {
      swept = std::erase_if(blocks_, [now](const auto& b) { return b.second <= now; });
      sweep_at_ = std::max<std::size_t>(64, 2 * blocks_.size());
    }
    blocks_.insert_or_assign(std::string(key), until);
    return swept;
  }
  // Ends the block of `key`; returns the entries dropped (0 or 1).
  std::size_t Erase(std::string_view key) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return 0;
    blocks_.erase(it);
    return 1;
  }

 private:
  std::map<std::string, Micros, std::less<>> blocks_;
  std::size_t sweep_at_ = 64;
};

}  // namespace sluice::memory_internal
