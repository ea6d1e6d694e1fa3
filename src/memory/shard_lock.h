// The lock of one shard of the in-process store.
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice::memory_internal {

// A shard's lock: a word that is 0 (free), 1 (held) or 2 (held, maybe with waiters).
// A thread that finds it held spins briefly before it sleeps (std::atomic::wait, a
// futex on Linux). A decision holds the lock for a few dozen nanoseconds, far less
// than a futex sleep and wake-up cost: std::mutex (glibc) sleeps at the first
// failed attempt, so two threads on one hot key spent most of their time in
// futex system calls and two threads decided fewer keys than one.
class ShardLock {
 public:
  void lock() {
    std::uint32_t c = 0;
    if (word_.compare_exchange_strong(c, 1, std::memory_order_acquire)) return;
    for (int spin = 0; spin < kSpins; ++spin) {
      Pause();
      if (word_.load(std::memory_order_relaxed) != 0) continue;
      c = 0;
      if (word_.compare_exchange_weak(c, 1, std::memory_order_acquire)) return;
    }
    while (word_.exchange(2, std::memory_order_acquire) != 0) word_.wait(2);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) == 2) word_.notify_one();
  }

 private:
  static constexpr int kSpins = 200;
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  std::atomic<std::uint32_t> word_{0};
};

}  // namespace sluice::memory_internal
