// The leased policies shared by lease_test.cc and its helper process.
#pragma once

#include <chrono>
#include <vector>

#include "concurrency_policies.h"
#include "sluice/policy.h"

namespace sluice::testing {

// Per-process lease bound of LeasePolicies() (a tenth of the limit); the fleet's
// over-admission bound for token bucket and GCRA is processes x this
// (docs/algorithms.md, "Leases").
inline constexpr std::uint64_t kLoadLease = kConcurrencyLimit / 10;

// kConcurrencyLimit per second, as tests/integration/concurrency_policies.h, each with a
// lease of up to kLoadLease units valid for at most 100 ms (window / 10).
inline std::vector<Policy> LeasePolicies() {
  using std::chrono::seconds;
  constexpr std::uint64_t n = kConcurrencyLimit;
  std::vector<Policy> p = {
      Policy::FixedWindow("lfixed", n, seconds(1)),
      Policy::SlidingWindowCounter("lcounter", n, seconds(1)),
      Policy::TokenBucket("lbucket", n, n, seconds(1)),
      Policy::Gcra("lgcra", n, seconds(1), n),
  };
  for (Policy& x : p) {
    x.failure_mode = FailureMode::kFailClosed;
    x.lease = kLoadLease;
  }
  return p;
}

// What a killed process may hold: a fixed window of 2000 per hour with leases of up
// to 100 units (valid 6 minutes: the test's whole run).
inline constexpr std::uint64_t kHeldLimit = 2000;
inline constexpr std::uint64_t kHeldLease = 100;
inline Policy HeldPolicy() {
  Policy p = Policy::FixedWindow("held", kHeldLimit, std::chrono::hours(1));
  p.failure_mode = FailureMode::kFailClosed;
  p.lease = kHeldLease;
  return p;
}

// ---- Reservations (issue #12 item 2): the fleet of reservation_fleet_test.cc ----

// 50 per second with bursts of 5, one key per algorithm; a reservation waits at most
// 200 ms. In any 1 s window the admitted times may hold at most 50 + 5.
inline constexpr std::uint64_t kReserveLimit = 50;
inline constexpr std::uint64_t kReserveBurst = 5;
inline constexpr Micros kReserveMaxWait = 200'000;
inline std::vector<Policy> ReservePolicies() {
  using std::chrono::seconds;
  std::vector<Policy> p = {
      Policy::TokenBucket("rbucket", kReserveBurst, kReserveLimit, seconds(1)),
      Policy::Gcra("rgcra", kReserveLimit, seconds(1), kReserveBurst),
  };
  for (Policy& x : p) x.failure_mode = FailureMode::kFailClosed;
  return p;
}

}  // namespace sluice::testing
