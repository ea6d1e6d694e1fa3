// sluice/clock.h: where a limiter's idea of "now" comes from.
//
// All sluice time is an integer count of microseconds since the Unix epoch
// (the unit Redis's TIME command returns). Algorithms never read a clock; the
// limiter reads its Clock once per decision and passes the value down, so tests
// drive time with a ManualClock and never sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace sluice {

// Microseconds since the Unix epoch.
using Micros = std::int64_t;

// A source of the current time. Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // The current time in microseconds since the Unix epoch.
  virtual Micros Now() const = 0;
};

// The default clock: steady (it never jumps when the wall clock is adjusted) yet
// aligned to the epoch, so fixed windows line up with wall-clock minutes. It reads
// the system clock once at construction and then advances with the steady clock.
class SteadyEpochClock final : public Clock {
 public:
  SteadyEpochClock();
  Micros Now() const override;

 private:
  Micros epoch_at_start_;
  std::chrono::steady_clock::time_point steady_at_start_;
};

// A clock that only moves when told to. For tests and simulations. Thread-safe.
class ManualClock final : public Clock {
 public:
  // Starts at `start` microseconds since the epoch.
  explicit ManualClock(Micros start = 0) : now_(start) {}
  Micros Now() const override { return now_.load(std::memory_order_acquire); }
  // Sets the time; may move backwards (sluice must then mint nothing).
  void Set(Micros t) { now_.store(t, std::memory_order_release); }
  // Moves the time by `d` microseconds (negative moves it back).
  void Advance(Micros d) { now_.fetch_add(d, std::memory_order_acq_rel); }

 private:
  std::atomic<Micros> now_;
};

// ---- Waiting (issue #12, reservations: Limiter::AcquireWaiting) ----

// A flag that asks a wait to end early. Cancel() may be called from any thread, any
// number of times; a token once cancelled stays cancelled. Thread-safe. Not movable
// (waiters keep pointers to it); it must outlive every wait that watches it.
class CancellationToken {
 public:
  CancellationToken() = default;
  CancellationToken(const CancellationToken&) = delete;
  CancellationToken& operator=(const CancellationToken&) = delete;

  // Cancels: every wait watching this token ends (its caller gets kCancelled).
  void Cancel();
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // Calls `f` once when the token is cancelled, on the thread that cancels it, or at
  // once (on this thread) when it already is. `f` must not call this token's
  // methods. Returns an id for Unsubscribe. For Sleeper implementations.
  std::uint64_t OnCancel(std::function<void()> f);
  // Forgets the callback `id`. When it returns, that callback is not running and will
  // not run.
  void Unsubscribe(std::uint64_t id);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::uint64_t next_id_ = 1;
  std::vector<std::pair<std::uint64_t, std::function<void()>>> callbacks_;
};

// Where a limiter waits (Limiter::AcquireWaiting): the partner of its Clock, so that
// tests wait in simulated time. Implementations must be thread-safe.
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Blocks for `d` microseconds of this sleeper's time (returns at once when d <= 0)
  // or until `cancel` (may be null) is cancelled. Returns true when the time has
  // passed, false when the wait was cancelled (also when `cancel` already was).
  virtual bool SleepFor(Micros d, CancellationToken* cancel) = 0;
};

// The default sleeper: real time (a steady-clock timed wait, woken by cancellation).
class SystemSleeper final : public Sleeper {
 public:
  bool SleepFor(Micros d, CancellationToken* cancel) override;
};

// A sleeper on a ManualClock, for tests and simulations. Two modes:
//  - manual (the default): SleepFor(d) blocks until the clock reaches the time it was
//    called at + d; time moves with Advance (which wakes the sleepers whose time has
//    come) or with the clock's own Set/Advance followed by Wake();
//  - auto_advance: SleepFor(d) moves the clock forward by d itself and returns (for
//    single-threaded simulations: "sleeping" is time passing).
class ManualSleeper final : public Sleeper {
 public:
  explicit ManualSleeper(std::shared_ptr<ManualClock> clock, bool auto_advance = false);
  bool SleepFor(Micros d, CancellationToken* cancel) override;

  // Moves the clock by `d` and wakes every sleeper whose time has come.
  void Advance(Micros d);
  // Wakes every sleeper to look at the clock again (after the clock moved by itself).
  void Wake();
  // Threads blocked in SleepFor right now.
  std::size_t sleepers() const;
  // Waits (in real time, at most `bound`) until at least `n` threads are blocked in
  // SleepFor; returns whether they are. For tests that must advance time only once
  // the waiters are asleep.
  bool AwaitSleepers(std::size_t n, std::chrono::milliseconds bound);
  // Every duration passed to SleepFor (d > 0), in call order.
  std::vector<Micros> slept() const;

 private:
  std::shared_ptr<ManualClock> clock_;
  const bool auto_advance_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::size_t sleeping_ = 0;
  std::vector<Micros> slept_;
};

}  // namespace sluice
