// Shared by permit_fleet_test.cc and its helper process (permit_load_helper.cc).
#pragma once

#include <atomic>
#include <chrono>

#include "sluice/policy.h"

namespace sluice::testing {

inline constexpr std::uint64_t kFleetMaxInFlight = 5;

// Long enough that no permit of a live thread expires during the test: then at most
// kFleetMaxInFlight threads can be inside the protected section at once.
inline Policy FleetPolicy() {
  return Policy::Concurrency("inflight", kFleetMaxInFlight, std::chrono::seconds(60));
}

// In a file every process maps (MAP_SHARED); lock-free atomics work across processes.
struct FleetCounter {
  std::atomic<long> in_flight{0};
  std::atomic<long> max_seen{0};
};
static_assert(std::atomic<long>::is_always_lock_free);

}  // namespace sluice::testing
