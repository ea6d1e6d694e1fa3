// One key of the in-process store: a 64-byte slot (one cache line) holding the key
// (inline up to kInlineKey bytes, else on the heap), the algorithm's state and the
// time at which that state is back to "full".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include "core/algorithm_ops.h"
#include "core/algorithms.h"
#include "memory/key_hash.h"
#include "memory/log_ring.h"
#include "sluice/policy.h"

namespace sluice::memory_internal {

constexpr std::size_t kInlineKey = 30;
constexpr std::uint8_t kHeapKey = 0xFF;

constexpr std::uint8_t TagOf(Algorithm a) {
  return static_cast<std::uint8_t>(static_cast<std::uint8_t>(a) + 1);
}

// --- carry-over (Policy::on_change; issue #12 item 4) ---
// A slot written by a policy whose on_change is not kAsIs records the parameters it was
// written under: the tag has kCarryTag set, and the state holds the id of the
// parameters in the store's ParamsRegistry (CarryId/SetCarryId below). Such slots never
// take the one-check fast path (its tag test fails), so the common path is unchanged.
constexpr std::uint8_t kCarryTag = 0x80;
// Ids are 24 bits (a sliding counter keeps its id in the top bits of `prev`, whose
// counts stay below 2^40 > 10^12, the largest limit).
constexpr std::uint32_t kMaxCarryId = (1u << 24) - 1;
constexpr int kCounterIdShift = 40;
constexpr std::uint64_t kCounterMask = (std::uint64_t{1} << kCounterIdShift) - 1;

union State {
  State() : word{} {}
  core::WordState word;  // the algorithms of core/algorithm_ops.h
  LogBuffer* log;
  core::PermitSet* permits;  // concurrency limits (owned)
};
static_assert(sizeof(State) == 24);
// Bytes 16-19 of the state are free for a carry-over record (memory/carry.h) but for
// the sliding counter.
static_assert(sizeof(core::FixedWindowState) <= 16 && sizeof(core::TokenBucketState) <= 16 &&
              sizeof(core::GcraState) <= 16);

// A key longer than kInlineKey: its bytes live on the heap; its hash is kept in the
// slot so that probing past it, or moving it, never touches the heap.
struct HeapKey {
  char* data;
  std::uint32_t len;
  std::uint64_t hash;
};
static_assert(sizeof(HeapKey) <= kInlineKey);

// One cache line: a probe reads exactly one line.
struct alignas(64) Slot {
  Micros expires;
  State state;
  // The key's bytes, or a HeapKey. At an 8-byte offset, so that a HeapKey's pointer is
  // an aligned word: LeakSanitizer (which scans aligned words) then sees the heap key
  // as reachable instead of leaked.
  char key[kInlineKey];
  std::uint8_t tag;      // 0: empty; else TagOf(the algorithm `state` belongs to)
  std::uint8_t key_len;  // <= kInlineKey, or kHeapKey

  bool empty() const { return tag == 0; }
  HeapKey Heap() const {
    HeapKey h;
    std::memcpy(&h, key, sizeof(h));
    return h;
  }
  bool Matches(std::uint64_t hash, std::string_view k) const {
    if (key_len != kHeapKey) {
      return key_len == k.size() && std::memcmp(key, k.data(), k.size()) == 0;
    }
    const HeapKey h = Heap();
    return h.hash == hash && h.len == k.size() && std::memcmp(h.data, k.data(), k.size()) == 0;
  }
  std::uint64_t Hash() const {
    return key_len != kHeapKey ? HashKey(std::string_view(key, key_len)) : Heap().hash;
  }
  void SetKey(std::uint64_t hash, std::string_view k) {
    if (k.size() <= kInlineKey) {
      key_len = static_cast<std::uint8_t>(k.size());
      std::memcpy(key, k.data(), k.size());
      return;
    }
    HeapKey h{static_cast<char*>(std::malloc(k.size())), static_cast<std::uint32_t>(k.size()),
              hash};
    if (h.data == nullptr) throw std::bad_alloc();
    std::memcpy(h.data, k.data(), k.size());
    key_len = kHeapKey;
    std::memcpy(key, &h, sizeof(h));
  }
  void Free() {
    if (key_len == kHeapKey) std::free(Heap().data);
    if ((tag & ~kCarryTag) == TagOf(Algorithm::kSlidingWindowLog) && state.log) {
      std::free(state.log);
    }
    if (tag == TagOf(Algorithm::kConcurrency)) delete state.permits;
    tag = 0;
  }
};
static_assert(sizeof(Slot) == 64);
static_assert(offsetof(Slot, key) % alignof(char*) == 0);

}  // namespace sluice::memory_internal
