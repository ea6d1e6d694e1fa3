// The sliding window log of one key in the in-process store: a malloc'd ring of
// entries (core::SlidingLog), so that a slot holds a bare pointer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>

#include "core/algorithms.h"

namespace sluice::memory_internal {

// A growable ring buffer of log entries, allocated with malloc so the slot can hold a
// bare pointer. Capacity doubles up to the policy's limit.
struct LogBuffer {
  Micros last_seen;
  std::uint64_t used;
  std::uint32_t head;
  std::uint32_t count;
  std::uint32_t capacity;
  core::LogEntry entries[1];

  static LogBuffer* Make(std::uint32_t capacity) {
    void* mem = std::malloc(sizeof(LogBuffer) + sizeof(core::LogEntry) * (capacity - 1));
    if (mem == nullptr) throw std::bad_alloc();
    return Init(static_cast<LogBuffer*>(mem), capacity);
  }
  static LogBuffer* Init(LogBuffer* b, std::uint32_t capacity) {
    b->last_seen = std::numeric_limits<Micros>::min();
    b->used = 0;
    b->head = 0;
    b->count = 0;
    b->capacity = capacity;
    return b;
  }
};

class RingLog final : public core::SlidingLog {
 public:
  RingLog(LogBuffer** buf, std::uint64_t limit) : buf_(buf), limit_(limit) {}
  Micros last_seen() const override { return (*buf_)->last_seen; }
  void set_last_seen(Micros t) override { (*buf_)->last_seen = t; }
  std::size_t size() const override { return (*buf_)->count; }
  const core::LogEntry& at(std::size_t i) const override {
    const LogBuffer* b = *buf_;
    return b->entries[(b->head + i) % b->capacity];
  }
  void pop_front() override {
    LogBuffer* b = *buf_;
    b->used -= b->entries[b->head].cost;
    b->head = (b->head + 1) % b->capacity;
    --b->count;
  }
  void pop_back() override {
    LogBuffer* b = *buf_;
    --b->count;
    b->used -= b->entries[(b->head + b->count) % b->capacity].cost;
  }
  void push_back(core::LogEntry e) override {
    LogBuffer* b = *buf_;
    if (b->count == b->capacity) {
      // Up to the limit; beyond it only for penalties, which may take a log to twice
      // its limit (core::SlidingWindowLogPenalize).
      const std::uint64_t bound = b->capacity < limit_ ? limit_ : 2 * limit_;
      const auto cap = static_cast<std::uint32_t>(std::min<std::uint64_t>(
          bound, std::max<std::uint64_t>(4, std::uint64_t{b->capacity} * 2)));
      LogBuffer* n = LogBuffer::Make(cap);
      n->last_seen = b->last_seen;
      n->used = b->used;
      for (std::uint32_t i = 0; i < b->count; ++i) {
        n->entries[i] = b->entries[(b->head + i) % b->capacity];
      }
      n->count = b->count;
      std::free(b);
      *buf_ = b = n;
    }
    b->entries[(b->head + b->count) % b->capacity] = e;
    ++b->count;
    b->used += e.cost;
  }
  std::uint64_t used() const override { return (*buf_)->used; }

 private:
  LogBuffer** buf_;
  std::uint64_t limit_;
};

}  // namespace sluice::memory_internal
