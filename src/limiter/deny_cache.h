// The decision layer's local deny cache: keys known to be over their limit, denied
// without a store call until their retry time (only for remote stores).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>

#include "core/hash.h"
#include "sluice/clock.h"
#include "sluice/decision.h"

namespace sluice::decide {

// A bounded, direct-mapped cache of keys known to be denied until a time. Its size is
// a byte budget fixed at construction: slots are plain 64-byte records (the key is a
// 128-bit hash, not a copy), so the cache never allocates after it is built, and its
// memory is calloc'ed (untouched pages cost no RSS). A collision overwrites:
// forgetting a denial only costs one store call.
class DenyCache {
 public:
  explicit DenyCache(std::size_t max_bytes) {
    std::size_t n = 16;
    while (n * 2 * sizeof(Entry) <= max_bytes) n <<= 1;
    slots_.reset(static_cast<Entry*>(std::calloc(n, sizeof(Entry))));
    mask_ = n - 1;
  }

  std::size_t bytes() const { return (mask_ + 1) * sizeof(Entry); }

  // True (and fills `d`) when `key` is known to deny a request of `cost` at `now`.
  // A reservation (`max_wait` > 0) is denied only when the denial lasts beyond
  // max_wait (+1 us of rounding slack): otherwise the store may grant it.
  bool Lookup(std::string_view key, std::uint64_t cost, Micros now, Decision* d,
              Micros max_wait = 0) {
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    const std::uint64_t h2 = Fnv1a64(key, kFnvOffsetAlt) | 1;  // 0 marks an empty slot
    Entry e;
    {
      std::lock_guard<std::mutex> lock(LockOf(h1));
      e = slots_.get()[h1 & mask_];
    }
    if (e.h1 != h1 || e.h2 != h2 || e.until <= now || cost < e.min_cost) return false;
    if (max_wait > 0 && e.until - now <= max_wait + 1) return false;
    *d = Decision{};
    d->allowed = false;
    d->limit = e.limit;
    d->remaining = e.remaining;
    d->retry_after = e.until - now;
    d->reset_after = std::max<Micros>(0, e.reset_at - now);
    d->source = DecisionSource::kDenyCache;
    return true;
  }

  void Insert(std::string_view key, std::uint64_t cost, Micros now, const Decision& d) {
    if (d.retry_after <= 0) return;
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    const std::uint64_t h2 = Fnv1a64(key, kFnvOffsetAlt) | 1;
    const Entry e{h1,
                  h2,
                  now + d.retry_after,
                  now + d.reset_after,
                  std::max<std::uint64_t>(cost, 1),
                  d.limit,
                  d.remaining,
                  0};
    std::lock_guard<std::mutex> lock(LockOf(h1));
    slots_.get()[h1 & mask_] = e;
  }

  void Erase(std::string_view key) {
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    std::lock_guard<std::mutex> lock(LockOf(h1));
    Entry& e = slots_.get()[h1 & mask_];
    if (e.h1 == h1) e.until = 0;
  }

 private:
  struct Entry {
    std::uint64_t h1, h2;
    Micros until, reset_at;
    std::uint64_t min_cost, limit, remaining, pad;
  };
  static_assert(sizeof(Entry) == 64);
  struct Free {
    void operator()(Entry* p) const { std::free(p); }
  };
  std::mutex& LockOf(std::uint64_t h) { return locks_[(h >> 32) % locks_.size()]; }

  std::unique_ptr<Entry, Free> slots_;
  std::size_t mask_ = 0;
  std::array<std::mutex, 64> locks_;
};

}  // namespace sluice::decide
