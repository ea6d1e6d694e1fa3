// Every rate algorithm at the edges of what ValidatePolicy accepts (the smallest and
// largest limit, window, burst and debt), under every operation, with costs from 1 to
// the most a check may ask and time moving far forward (and given back, which the store
// holds at the latest now it has seen). Run under UBSan by the asan preset, where any
// overflow or out-of-range cast fails the test; here, every decision must also stay
// within its policy's bounds.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/algorithms.h"
#include "edge_policies.h"
#include "sluice/memory_store.h"
#include "sluice/store.h"

namespace sluice::testing {
namespace {

void ExpectWithinBounds(const Policy& p, const StoreCheck& c, const Decision& d,
                        const std::string& where) {
  EXPECT_EQ(d.limit, p.Capacity()) << where;
  EXPECT_LE(d.remaining, p.Capacity()) << where;
  EXPECT_GE(d.reset_after, 0) << where;
  EXPECT_GE(d.retry_after, 0) << where;
  EXPECT_GE(d.wait, 0) << where;
  EXPECT_LE(d.wait, c.max_wait) << where;
  // (under an overage the decision of a denial is a peek afterwards, which may pass)
  if (!d.allowed && p.overage == Overage::kReject) {
    EXPECT_GE(d.retry_after, 1) << where;
  }
}

TEST(ExtremePolicies, EveryOperationStaysInRangeAcrossTime) {
  const std::vector<Policy> policies = edge::Policies();
  ASSERT_GE(policies.size(), 40u);
  std::size_t decided = 0;
  for (std::size_t pi = 0; pi < policies.size(); ++pi) {
    MemoryStore store;  // (each policy's sequence starts at the same instant)
    const Policy& p = policies[pi];
    const std::string key = "edge:" + std::to_string(pi);
    for (const edge::Step& step : edge::Steps(p, /*back=*/true)) {
      const StoreCheck c{.policy = &p, .key = key, .cost = step.cost, .max_wait = step.max_wait};
      const StoreBatch batch{.op = step.op, .checks = {&c, 1}, .now = step.now};
      const std::string where =
          "policy " + std::to_string(pi) + " " + edge::Describe(p) + " " + step.Describe();
      ASSERT_TRUE(ValidateBatch(batch).ok()) << where << ": " << ValidateBatch(batch).message();
      Decision d;
      const bool refund = step.op == StoreOp::kRefund;
      const Status s =
          store.Run(batch, refund ? std::span<Decision>() : std::span<Decision>(&d, 1));
      ASSERT_TRUE(s.ok()) << where << ": " << s.message();
      if (!refund) {
        ExpectWithinBounds(p, c, d, where);
        ++decided;
      }
    }
  }
  EXPECT_GT(decided, 1000u);
}

// A cost beyond the capacity (an overage check asks up to 2^32 units) at one a year
// waits beyond any clock: the wait is capped at 2^62 us. It was cast from 1.4e23
// (undefined; on x86 it came out as 1 us).
TEST(ExtremePolicies, AWaitBeyondAnyClockIsCapped) {
  for (const Algorithm a : {Algorithm::kTokenBucket, Algorithm::kGcra}) {
    Policy p;
    p.name = "slow";
    p.algorithm = a;
    p.limit = 1;
    p.window = edge::kYear;
    p.overage = Overage::kDrain;
    ASSERT_TRUE(ValidatePolicy(p).ok());
    ASSERT_EQ(p.MaxCost(), std::uint64_t{1} << 32);
    Micros expires = 0;
    Decision d;
    if (a == Algorithm::kTokenBucket) {
      core::TokenBucketState out;
      d = core::TokenBucket(p, {}, true, edge::kStart, p.MaxCost(), &out, &expires, 0);
    } else {
      core::GcraState out;
      d = core::Gcra(p, {}, true, edge::kStart, p.MaxCost(), &out, &expires, 0);
    }
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, Micros{1} << 62) << static_cast<int>(a);
  }
}

}  // namespace
}  // namespace sluice::testing
