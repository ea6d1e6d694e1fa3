// Every rate algorithm at the edges of what ValidatePolicy accepts (the smallest and
// largest limit, window, burst and debt), under every operation, with costs from 1 to
// the most a check may ask and time moving far forward and back. Run under UBSan by the
// asan preset, where any overflow or out-of-range cast fails the test; here, every
// decision must also stay within its policy's bounds.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/algorithms.h"
#include "sluice/memory_store.h"
#include "sluice/store.h"

namespace sluice {
namespace {

constexpr Micros kDay = 86'400'000'000LL;
constexpr Micros kYear = 366 * kDay;  // the longest window
constexpr std::uint64_t kMax = 1'000'000'000'000ULL;
constexpr Micros kStart = 1785412800LL * 1'000'000;

// The largest burst (or debt) whose refill at limit/window takes at most 366 days.
std::uint64_t MostWithinAYear(std::uint64_t limit, Micros window) {
  const unsigned __int128 most =
      static_cast<unsigned __int128>(kYear) * limit / static_cast<unsigned __int128>(window);
  return most > kMax ? kMax : static_cast<std::uint64_t>(most);
}

// The policies at the edges: each algorithm, limit 1 or 10^12 (10^3 for the log, which
// keeps an entry per unit), window 1 ms or 366 days, the smallest and largest burst,
// and each overage mode with the largest debt.
std::vector<Policy> EdgePolicies() {
  std::vector<Policy> out;
  const Algorithm algorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                  Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket,
                                  Algorithm::kGcra};
  for (const Algorithm a : algorithms) {
    const bool log = a == Algorithm::kSlidingWindowLog;
    const bool bucket = a == Algorithm::kTokenBucket || a == Algorithm::kGcra;
    for (const std::uint64_t limit : {std::uint64_t{1}, log ? std::uint64_t{1000} : kMax}) {
      for (const Micros window : {Micros{1000}, kYear}) {
        std::vector<std::uint64_t> bursts = {0};
        if (bucket) bursts = {1, MostWithinAYear(limit, window)};
        for (const std::uint64_t burst : bursts) {
          for (const Overage overage : {Overage::kReject, Overage::kCharge, Overage::kDrain}) {
            Policy p;
            p.name = "edge";
            p.algorithm = a;
            p.limit = limit;
            p.window = window;
            p.burst = burst;
            p.overage = overage;
            if (overage == Overage::kCharge) {
              p.max_debt = bucket ? MostWithinAYear(limit, window) : log ? limit : kMax;
            }
            const Status s = ValidatePolicy(p);
            EXPECT_TRUE(s.ok()) << s.message();
            if (s.ok()) out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

// The costs a check of `op` may ask of p, smallest to largest.
std::vector<std::uint64_t> EdgeCosts(const Policy& p, StoreOp op) {
  const std::uint64_t most = op == StoreOp::kDecide ? p.MaxCost() : p.Capacity();
  std::vector<std::uint64_t> costs = {1, p.Capacity(), most};
  if (op == StoreOp::kDecide) costs.push_back(0);
  return costs;
}

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
  const std::vector<Policy> policies = EdgePolicies();
  ASSERT_GE(policies.size(), 40u);
  MemoryStore store;
  // (forward by a little and by years, and back: a store's clock may do either)
  const Micros steps[] = {0, 1, kYear / 2, -kYear, 3 * kYear, 1, -1, kYear};
  std::size_t decided = 0;
  for (std::size_t pi = 0; pi < policies.size(); ++pi) {
    const Policy& p = policies[pi];
    const std::string key = "edge:" + std::to_string(pi);
    Micros now = kStart;
    for (const Micros step : steps) {
      now += step;
      for (const StoreOp op : {StoreOp::kDecide, StoreOp::kRefund, StoreOp::kPenalize}) {
        for (const std::uint64_t cost : EdgeCosts(p, op)) {
          for (const Micros max_wait : {Micros{0}, p.window}) {
            if (op != StoreOp::kDecide && max_wait != 0) continue;
            // (a reservation that waits needs overage reject: StoreCheck::max_wait)
            if (max_wait != 0 && (p.overage != Overage::kReject || cost > p.Capacity())) continue;
            const StoreCheck c{.policy = &p, .key = key, .cost = cost, .max_wait = max_wait};
            const StoreBatch batch{.op = op, .checks = {&c, 1}, .now = now};
            const std::string where =
                "policy " + std::to_string(pi) + " (alg " +
                std::to_string(static_cast<int>(p.algorithm)) + ", limit " +
                std::to_string(p.limit) + ", window " + std::to_string(p.window) + ", burst " +
                std::to_string(p.burst) + ") op " + std::to_string(static_cast<int>(op)) +
                " cost " + std::to_string(cost) + " now " + std::to_string(now);
            ASSERT_TRUE(ValidateBatch(batch).ok())
                << where << ": " << ValidateBatch(batch).message();
            Decision d;
            const Status s = store.Run(
                batch, op == StoreOp::kRefund ? std::span<Decision>() : std::span<Decision>(&d, 1));
            ASSERT_TRUE(s.ok()) << where << ": " << s.message();
            if (op != StoreOp::kRefund) {
              ExpectWithinBounds(p, c, d, where);
              ++decided;
            }
          }
        }
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
    p.window = kYear;
    p.overage = Overage::kDrain;
    ASSERT_TRUE(ValidatePolicy(p).ok());
    ASSERT_EQ(p.MaxCost(), std::uint64_t{1} << 32);
    Micros expires = 0;
    Decision d;
    if (a == Algorithm::kTokenBucket) {
      core::TokenBucketState out;
      d = core::TokenBucket(p, {}, true, kStart, p.MaxCost(), &out, &expires, 0);
    } else {
      core::GcraState out;
      d = core::Gcra(p, {}, true, kStart, p.MaxCost(), &out, &expires, 0);
    }
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, Micros{1} << 62) << static_cast<int>(a);
  }
}

}  // namespace
}  // namespace sluice
