// The memory of a slot table (huge pages for big tables).
#pragma once

#include <cstddef>
#include <utility>

#include "memory/slot.h"

namespace sluice::memory_internal {

// A table's slots, zeroed (every slot empty). Arrays of 2 MiB or more start on a 2 MiB
// boundary and ask for transparent huge pages over their whole 2 MiB pages: a decision
// on a random key of a big table then needs no page walk (with 4 KiB pages, 1M keys
// span ~24,000 pages, far more than the TLB holds, and each miss walks the page
// tables before the slot's own cache miss). The memory comes from malloc so that
// LeakSanitizer still scans it for the heap keys it points to.
class SlotArray {
 public:
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  SlotArray() = default;
  explicit SlotArray(std::size_t n);
  ~SlotArray() { std::free(p_); }
  SlotArray(const SlotArray&) = delete;
  SlotArray& operator=(const SlotArray&) = delete;
  void swap(SlotArray& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }

  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  Slot* data() { return p_; }
  Slot& operator[](std::size_t i) { return p_[i]; }
  Slot* begin() { return p_; }
  Slot* end() { return p_ + n_; }

 private:
  static std::size_t RoundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
  Slot* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace sluice::memory_internal
