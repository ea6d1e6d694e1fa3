// sluice/clock.h: where a limiter's idea of "now" comes from.
//
// All sluice time is an integer count of microseconds since the Unix epoch
// (the unit Redis's TIME command returns). Algorithms never read a clock; the
// limiter reads its Clock once per decision and passes the value down, so tests
// drive time with a ManualClock and never sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

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

}  // namespace sluice
