// Internal: lets a thread wait for a callback with a hard deadline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "redis/deadline.h"

namespace sluice::redis {

// The callback and the waiter race to claim the result; the loser leaves the other
// alone, so a waiter that gave up never sees a late result. Share it (shared_ptr)
// between the two.
template <typename T>
class Waiter {
 public:
  // Called by the producer: fills the result unless the waiter already gave up.
  template <typename F>
  void Complete(F&& fill) {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    std::lock_guard<std::mutex> lock(mu_);
    fill(value_);
    done_ = true;
    cv_.notify_all();  // under the lock: the waiter may destroy its reference after it
  }
  // Waits for Complete until `deadline`. False: gave up (nothing will be filled).
  bool Wait(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, deadline, [&] { return done_; })) return true;
    if (!claimed_.exchange(true, std::memory_order_acq_rel)) return false;
    cv_.wait(lock, [&] { return done_; });  // the producer is filling it right now
    return true;
  }
  // Waits for Complete without a bound: for producers that always complete by a
  // deadline of their own (the connection's I/O thread does).
  void WaitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  T& value() { return value_; }

 private:
  std::atomic<bool> claimed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  T value_{};
};

}  // namespace sluice::redis
