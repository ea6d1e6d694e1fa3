// The open-addressing hash table of one shard: linear probing over 64-byte slots,
// backward-shift deletion (no tombstones), growth by 1.5x at 7/8 load.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "memory/key_hash.h"
#include "memory/memory_store_internal.h"
#include "memory/slot.h"
#include "memory/slot_array.h"

namespace sluice::memory_internal {

class Table {
 public:
  ~Table() {
    for (Slot& s : slots_) {
      if (!s.empty()) s.Free();
    }
  }

  std::size_t size() const { return size_; }

  // Starts loading the home slot of `hash` into the cache. Called without the lock:
  // it reads the array's address and size from copies kept for it (a concurrent Grow
  // may leave them stale; a prefetch of a stale address loads nothing useful but
  // never faults).
  void Prefetch(std::uint64_t hash) const {
    const std::size_t n = prefetch_size_.load(std::memory_order_relaxed);
    if (n != 0) {
      __builtin_prefetch(prefetch_base_.load(std::memory_order_relaxed) +
                         memory_internal::HomeSlot(hash, n));
    }
  }

  Slot* Find(std::uint64_t hash, std::string_view key) {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = Home(hash);; i = Next(i)) {
      Slot& s = slots_[i];
      if (s.empty()) return nullptr;
      if (s.Matches(hash, key)) return &s;
    }
  }

  // Inserts a key that is known to be absent, for `algorithm`; returns its slot (key
  // and tag set, state zeroed).
  Slot* Insert(std::uint64_t hash, std::string_view key, Algorithm algorithm) {
    if ((size_ + 1) * 8 > slots_.size() * 7) Grow();
    std::size_t i = Home(hash);
    while (!slots_[i].empty()) i = Next(i);
    Slot& s = slots_[i];
    s.SetKey(hash, key);
    s.tag = TagOf(algorithm);
    s.state = State{};
    s.expires = 0;
    ++size_;
    return &s;
  }

  // Removes every slot whose state is back to full at `now`; returns how many.
  std::size_t Sweep(Micros now);

  // Cheap incremental sweep of a few slots after the last visited one.
  std::size_t SweepSome(Micros now, int n);

  // The earliest time at which a full Sweep could remove anything.
  Micros next_expiry() const { return next_expiry_; }
  // Writes only when the minimum moves, so that the line stays clean (and shared
  // between cores) on the decision path.
  void NoteExpiry(Micros t) {
    if (t < next_expiry_) next_expiry_ = t;
  }

  void EraseSlot(Slot* s) { Erase(static_cast<std::size_t>(s - slots_.data())); }

 private:
  std::size_t Home(std::uint64_t hash) const {
    return memory_internal::HomeSlot(hash, slots_.size());
  }
  std::size_t Next(std::size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  // Backward-shift deletion of slot i.
  void Erase(std::size_t i);
  // Grows by 1.5x (filling its last huge page).
  void Grow();

  SlotArray slots_;
  // Prefetch's copies of slots_'s address and size, written by Grow.
  std::atomic<const Slot*> prefetch_base_{nullptr};
  std::atomic<std::size_t> prefetch_size_{0};
  std::size_t size_ = 0;
  std::size_t hand_ = 0;
  Micros next_expiry_ = std::numeric_limits<Micros>::max();
};

}  // namespace sluice::memory_internal
