#include "sluice/clock.h"

namespace sluice {

SteadyEpochClock::SteadyEpochClock()
    : epoch_at_start_(std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()),
      steady_at_start_(std::chrono::steady_clock::now()) {}

Micros SteadyEpochClock::Now() const {
  return epoch_at_start_ + std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now() - steady_at_start_)
                               .count();
}

}  // namespace sluice
