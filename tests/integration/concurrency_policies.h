// The policies shared by concurrency_test.cc and its helper process.
#pragma once

#include <chrono>
#include <vector>

#include "sluice/policy.h"

namespace sluice::testing {

inline std::vector<Policy> ConcurrencyPolicies() {
  using std::chrono::seconds;
  std::vector<Policy> p = {
      Policy::FixedWindow("fixed", 300, seconds(1)),
      Policy::SlidingWindowLog("log", 300, seconds(1)),
      Policy::SlidingWindowCounter("counter", 300, seconds(1)),
      Policy::TokenBucket("bucket", 300, 300, seconds(1)),
      Policy::Gcra("gcra", 300, seconds(1), 300),
  };
  for (Policy& x : p) x.failure_mode = FailureMode::kFailClosed;
  return p;
}

}  // namespace sluice::testing
