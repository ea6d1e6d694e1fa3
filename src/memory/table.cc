#include "memory/table.h"

#include <cstring>

namespace sluice::memory_internal {

std::size_t Table::Sweep(Micros now) {
  std::size_t removed = 0;
  Micros next = std::numeric_limits<Micros>::max();
  for (std::size_t i = 0; i < slots_.size();) {
    Slot& s = slots_[i];
    if (!s.empty() && s.expires <= now) {
      Erase(i);
      ++removed;
      continue;  // re-examine the slot a later entry was shifted into
    }
    if (!s.empty()) next = std::min(next, s.expires);
    ++i;
  }
  next_expiry_ = next;
  return removed;
}

std::size_t Table::SweepSome(Micros now, int n) {
  std::size_t removed = 0;
  if (slots_.empty()) return 0;
  for (int k = 0; k < n; ++k) {
    hand_ = hand_ + 1 >= slots_.size() ? 0 : hand_ + 1;
    Slot& s = slots_[hand_];
    if (!s.empty() && s.expires <= now) {
      Erase(hand_);
      ++removed;
    }
  }
  return removed;
}

void Table::Erase(std::size_t i) {
  slots_[i].Free();
  --size_;
  // Backward shift: pull later entries of the cluster into the hole when their home
  // position allows it.
  std::size_t hole = i;
  for (std::size_t j = Next(i);; j = Next(j)) {
    Slot& s = slots_[j];
    if (s.empty()) break;
    const std::size_t home = Home(s.Hash());
    // Can s move to `hole`? Only if hole lies cyclically in [home, j).
    const bool movable = (hole <= j) ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      std::memcpy(static_cast<void*>(&slots_[hole]), &s, sizeof(Slot));
      s.tag = 0;  // moved, not freed
      hole = j;
    }
  }
}

void Table::Grow() {
  std::size_t cap = std::max<std::size_t>(16, slots_.size() + slots_.size() / 2);
  // A table of a huge page or more fills its last huge page: it then lives wholly
  // in huge pages, and the extra slots shorten probe sequences.
  constexpr std::size_t kPerHugePage = SlotArray::kHugePage / sizeof(Slot);
  if (cap >= kPerHugePage) cap = (cap + kPerHugePage - 1) / kPerHugePage * kPerHugePage;
  SlotArray bigger(cap);
  SlotArray old;
  old.swap(slots_);
  slots_.swap(bigger);
  prefetch_base_.store(slots_.data(), std::memory_order_relaxed);
  prefetch_size_.store(slots_.size(), std::memory_order_relaxed);
  for (Slot& s : old) {
    if (s.empty()) continue;
    std::size_t i = Home(s.Hash());
    while (!slots_[i].empty()) i = Next(i);
    std::memcpy(static_cast<void*>(&slots_[i]), &s, sizeof(Slot));
  }
  hand_ = 0;
}

}  // namespace sluice::memory_internal
