// The policies shared by concurrency_test.cc and its helper process.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "sluice/policy.h"

namespace sluice::testing {

// Every policy allows this many per second (bursts of as many). Low enough that the
// fleet's load exceeds it several times over even under a sanitizer on a loaded 2-core
// machine (ASan with a CPU hog: about 280 decisions/s per policy), which the bounds
// need to mean anything.
inline constexpr std::uint64_t kConcurrencyLimit = 50;

inline std::vector<Policy> ConcurrencyPolicies() {
  using std::chrono::seconds;
  constexpr std::uint64_t n = kConcurrencyLimit;
  std::vector<Policy> p = {
      Policy::FixedWindow("fixed", n, seconds(1)),
      Policy::SlidingWindowLog("log", n, seconds(1)),
      Policy::SlidingWindowCounter("counter", n, seconds(1)),
      Policy::TokenBucket("bucket", n, n, seconds(1)),
      Policy::Gcra("gcra", n, seconds(1), n),
  };
  for (Policy& x : p) x.failure_mode = FailureMode::kFailClosed;
  return p;
}

}  // namespace sluice::testing
