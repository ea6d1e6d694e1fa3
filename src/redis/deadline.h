// Internal: the monotonic clock every Redis deadline is measured on.
#pragma once

#include <chrono>

#include "sluice/clock.h"

namespace sluice::redis {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

inline Deadline DeadlineAfter(Micros us) {
  return SteadyClock::now() + std::chrono::microseconds(us);
}

// Microseconds left until `d` (negative when it passed).
inline Micros MicrosUntil(Deadline d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d - SteadyClock::now()).count();
}

}  // namespace sluice::redis
