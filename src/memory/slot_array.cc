#include "memory/slot_array.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace sluice::memory_internal {

SlotArray::SlotArray(std::size_t n) : n_(n) {
  const std::size_t bytes = n * sizeof(Slot);
  void* p = bytes >= kHugePage ? std::aligned_alloc(kHugePage, RoundUp(bytes, kHugePage))
                               : std::aligned_alloc(alignof(Slot), bytes);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (bytes >= kHugePage) (void)::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, bytes);
  p_ = static_cast<Slot*>(p);
}

}  // namespace sluice::memory_internal
