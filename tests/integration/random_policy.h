// The random policies and ids of the differential tests (differential_test.cc,
// coalesce_test.cc, the module's tests): one generator, each test choosing what it
// draws from. The draws come in a fixed order (algorithm, limit, window, a bucket's
// burst and initial tokens, then the features a test asks for), so a test's seeds keep
// giving it the same policies when another test changes its own choices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>

#include "sluice/permit_id.h"
#include "sluice/policy.h"

namespace sluice::testing {

// What RandomPolicy draws from. A feature drawn "one time in N" is left out at N = 0.
struct PolicyDraw {
  std::span<const Micros> windows;        // each equally likely
  std::span<const std::uint64_t> limits;  // each equally likely
  // A sliding log's limit at most this (its sorted set grows with the limit).
  std::uint64_t log_limit_cap = ~std::uint64_t{0};
  // A block_for of one to three windows (its own key, the state key + ":b").
  unsigned block_one_in = 0;
  // on_change reset or proportional (never a sliding log's: it ignores on_change).
  unsigned on_change_one_in = 0;
  // Overage charge or drain; a charge's max_debt half the time 1 up to
  // `debt_capacities` capacities (a sliding log's at most its limit).
  unsigned overage_one_in = 0;
  std::uint64_t debt_capacities = 2;
};

// A valid policy named "p<index>" of one of the five rate algorithms, as `d` says.
inline Policy RandomPolicy(std::mt19937_64& rng, int index, const PolicyDraw& d) {
  Policy p;
  p.name = "p" + std::to_string(index);
  p.algorithm = static_cast<Algorithm>(rng() % 5);  // fixed, log, counter, bucket, GCRA
  p.limit = d.limits[rng() % d.limits.size()];
  if (p.algorithm == Algorithm::kSlidingWindowLog) p.limit = std::min(p.limit, d.log_limit_cap);
  p.window = d.windows[rng() % d.windows.size()];
  if (p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) {
    if (rng() % 2) p.burst = p.limit + rng() % (2 * p.limit + 1);
    if (p.algorithm == Algorithm::kTokenBucket && rng() % 3 == 0) {
      p.initial_tokens = rng() % (p.Capacity() + 1);
    }
  }
  if (d.block_one_in != 0 && rng() % d.block_one_in == 0) {
    p.block_for = p.window * static_cast<Micros>(1 + rng() % 3);
  }
  if (d.on_change_one_in != 0 && rng() % d.on_change_one_in == 0 &&
      p.algorithm != Algorithm::kSlidingWindowLog) {
    p.on_change = rng() % 2 ? OnChange::kReset : OnChange::kProportional;
  }
  if (d.overage_one_in != 0 && rng() % d.overage_one_in == 0) {
    p.overage = rng() % 2 ? Overage::kCharge : Overage::kDrain;
    if (p.overage == Overage::kCharge && rng() % 2) {
      p.max_debt = 1 + rng() % (d.debt_capacities * p.Capacity());
    }
    if (p.algorithm == Algorithm::kSlidingWindowLog) p.max_debt = std::min(p.max_debt, p.limit);
  }
  EXPECT_TRUE(ValidatePolicy(p).ok()) << p.name << ": " << ValidatePolicy(p).ToString();
  return p;
}

// A new permit or usage record id: kPermitIdLength random lower-case hex characters.
inline std::string RandomId(std::mt19937_64& rng) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(kPermitIdLength, '0');
  for (char& c : id) c = kHex[rng() % 16];
  return id;
}

}  // namespace sluice::testing
