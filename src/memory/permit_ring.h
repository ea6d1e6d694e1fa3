// The held permits of one key in the in-process store (core::PermitSet).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "core/algorithms.h"

namespace sluice::memory_internal {

// --- concurrency limits (issue #12 item 1) ---
// The permits of one key, a ring ordered by expiry (LogBuffer's pattern: malloc'd, so
// the slot holds a bare pointer). Capacity doubles up to the policy's max_in_flight
// (beyond only for permits taken under a larger limit of the same policy name).
struct PermitBuffer {
  std::uint32_t head;
  std::uint32_t count;
  std::uint32_t capacity;
  core::PermitEntry entries[1];

  static PermitBuffer* Make(std::uint32_t capacity) {
    void* mem = std::malloc(sizeof(PermitBuffer) + sizeof(core::PermitEntry) * (capacity - 1));
    if (mem == nullptr) throw std::bad_alloc();
    return Init(static_cast<PermitBuffer*>(mem), capacity);
  }
  static PermitBuffer* Init(PermitBuffer* b, std::uint32_t capacity) {
    b->head = 0;
    b->count = 0;
    b->capacity = capacity;
    return b;
  }
};

class RingPermits final : public core::PermitSet {
 public:
  RingPermits(PermitBuffer** buf, std::uint64_t limit) : buf_(buf), limit_(limit) {}
  std::size_t size() const override { return (*buf_)->count; }
  const core::PermitEntry& at(std::size_t i) const override {
    const PermitBuffer* b = *buf_;
    return b->entries[(b->head + i) % b->capacity];
  }
  void pop_front() override {
    PermitBuffer* b = *buf_;
    b->head = (b->head + 1) % b->capacity;
    --b->count;
  }
  void erase(std::size_t i) override {
    PermitBuffer* b = *buf_;
    for (std::size_t j = i; j + 1 < b->count; ++j) {
      b->entries[(b->head + j) % b->capacity] = b->entries[(b->head + j + 1) % b->capacity];
    }
    --b->count;
  }
  void push_back(core::PermitEntry e) override {
    PermitBuffer* b = *buf_;
    if (b->count == b->capacity) {
      const auto cap = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(std::max<std::uint64_t>(limit_, b->capacity + 1),
                                  std::max<std::uint64_t>(4, std::uint64_t{b->capacity} * 2)));
      PermitBuffer* n = PermitBuffer::Make(cap);
      for (std::uint32_t i = 0; i < b->count; ++i) {
        n->entries[i] = b->entries[(b->head + i) % b->capacity];
      }
      n->count = b->count;
      std::free(b);
      *buf_ = b = n;
    }
    b->entries[(b->head + b->count) % b->capacity] = e;
    ++b->count;
  }

 private:
  PermitBuffer** buf_;
  std::uint64_t limit_;
};

}  // namespace sluice::memory_internal
