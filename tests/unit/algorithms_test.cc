// Each algorithm with a manual clock, parameterised over limits and windows.
#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "core/algorithm_ops.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

struct Shape {
  std::uint64_t limit;
  Micros window;
};
std::string ShapeName(const ::testing::TestParamInfo<Shape>& i) {
  return std::to_string(i.param.limit) + "_per_" + std::to_string(i.param.window / 1000) + "ms";
}
const Shape kShapes[] = {{1, kSec}, {5, kSec}, {10, 10 * kSec}, {100, kMin}, {1000, kMin}};

class AllAlgorithms : public ::testing::TestWithParam<std::tuple<Algorithm, Shape>> {
 protected:
  Policy Make() const {
    auto [a, s] = GetParam();
    Policy p;
    p.name = "p";
    p.algorithm = a;
    p.limit = s.limit;
    p.window = s.window;
    return p;
  }
};

// A fresh key gets exactly its capacity at one instant, then is denied.
TEST_P(AllAlgorithms, FreshKeyAllowsCapacityAtOnceThenDenies) {
  Policy p = Make();
  Harness h({p});
  for (std::uint64_t i = 0; i < p.limit; ++i) {
    Decision d = h.Take();
    ASSERT_TRUE(d.allowed) << "request " << i;
    EXPECT_EQ(d.remaining, p.limit - i - 1);
    EXPECT_EQ(d.limit, p.limit);
    EXPECT_EQ(d.retry_after, 0);
    EXPECT_GT(d.reset_after, 0);
  }
  Decision d = h.Take();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_GT(d.retry_after, 0);
  EXPECT_LE(d.retry_after, d.reset_after);
}

// Denied requests do not consume: after waiting retry_after, a request passes, no
// matter how many denials came before.
TEST_P(AllAlgorithms, DeniedRequestsDoNotConsumeAndRetryAfterIsExact) {
  Policy p = Make();
  Harness h({p});
  h.TakeN(static_cast<int>(p.limit));
  Decision d;
  for (int i = 0; i < 50; ++i) d = h.Take();
  ASSERT_FALSE(d.allowed);
  h.clock->Advance(d.retry_after - 1);
  EXPECT_FALSE(h.Take().allowed) << "passed before retry_after";
  h.clock->Advance(1);
  EXPECT_TRUE(h.Take().allowed) << "denied at retry_after";
}

// After reset_after nothing is left of the past: the full capacity is available.
TEST_P(AllAlgorithms, ResetAfterRestoresFullCapacity) {
  Policy p = Make();
  Harness h({p});
  h.TakeN(static_cast<int>(p.limit));
  Decision peek = *h.limiter->Peek("k");
  h.clock->Advance(peek.reset_after);
  Decision after = *h.limiter->Peek("k");
  EXPECT_EQ(after.remaining, p.limit);
  EXPECT_EQ(after.reset_after, 0);
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit)), static_cast<int>(p.limit));
}

// Time going backwards mints nothing.
TEST_P(AllAlgorithms, ClockGoingBackwardsMintsNothing) {
  Policy p = Make();
  Harness h({p});
  h.clock->Advance(p.window / 2);
  const int first = h.TakeN(static_cast<int>(p.limit) + 5);
  EXPECT_EQ(first, static_cast<int>(p.limit));
  for (Micros back : {Micros{1}, p.window / 3, p.window, 10 * p.window}) {
    h.clock->Advance(-back);
    EXPECT_EQ(h.TakeN(3), 0) << "went back " << back << "us";
    h.clock->Advance(back);
  }
}

// Peek consumes nothing and answers for a cost of 1.
TEST_P(AllAlgorithms, PeekConsumesNothing) {
  Policy p = Make();
  Harness h({p});
  for (int i = 0; i < 10; ++i) {
    Decision d = *h.limiter->Peek("k");
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, p.limit);
  }
  h.TakeN(static_cast<int>(p.limit));
  Decision d = *h.limiter->Peek("k");
  EXPECT_FALSE(d.allowed);
  EXPECT_GT(d.retry_after, 0);
}

// Keys are independent.
TEST_P(AllAlgorithms, KeysAreIndependent) {
  Policy p = Make();
  Harness h({p});
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit) + 1, "a"), static_cast<int>(p.limit));
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit) + 1, "b"), static_cast<int>(p.limit));
}

// ---- Refunds (Limiter::Refund / Store::Refund) ---------------------------------------

// A refunded unit can be taken again, once: the unit taken by the last allowed request
// is given back, and nothing more.
TEST_P(AllAlgorithms, RefundGivesTheUnitBack) {
  Policy p = Make();
  Harness h({p});
  h.clock->Advance(p.window / 3);
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit)), static_cast<int>(p.limit));
  ASSERT_FALSE(h.Take().allowed);
  ASSERT_TRUE(h.limiter->Refund("k").ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 1u);
  EXPECT_EQ(h.TakeN(3), 1);
  ASSERT_TRUE(h.limiter->Refund("k", p.limit).ok());
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit) + 2), static_cast<int>(p.limit));
}

// Refunding more than was taken never gives more than the full limit.
TEST_P(AllAlgorithms, RefundNeverMintsBeyondTheFullLimit) {
  Policy p = Make();
  Harness h({p});
  h.clock->Advance(p.window / 3);
  ASSERT_TRUE(h.Take().allowed);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.limiter->Refund("k", p.limit).ok());
  Decision d = *h.limiter->Peek("k");
  EXPECT_EQ(d.remaining, p.limit);
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit) + 3), static_cast<int>(p.limit));
}

// A key never charged has nothing to give back, and is left without state.
TEST_P(AllAlgorithms, RefundOfAnUnknownKeyChangesNothing) {
  Policy p = Make();
  Harness h({p});
  ASSERT_TRUE(h.limiter->Refund("never", 1).ok());
  EXPECT_EQ(h.store->Stats().keys, 0u);
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit) + 1, "never"), static_cast<int>(p.limit));
}

// Refunds with time going back mint nothing either: a refund never gives back more
// than was taken, whatever `now` says.
TEST_P(AllAlgorithms, RefundWithTheClockGoingBackMintsNothing) {
  Policy p = Make();
  Harness h({p});
  h.clock->Advance(p.window / 2);
  EXPECT_EQ(h.TakeN(static_cast<int>(p.limit)), static_cast<int>(p.limit));
  h.clock->Advance(-p.window / 4);
  ASSERT_TRUE(h.limiter->Refund("k", 1).ok());
  h.clock->Advance(p.window / 4);
  EXPECT_EQ(h.TakeN(3), 1);
}

TEST_P(AllAlgorithms, RefundRejectsZeroAndOverCapacityCosts) {
  Policy p = Make();
  Harness h({p});
  EXPECT_EQ(h.limiter->Refund("k", 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Refund("k", p.Capacity() + 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Refund("", 1).code(), ErrorCode::kInvalidArgument);
  const Check bad_policy{7, "k", 1};
  EXPECT_EQ(h.limiter->Refund(std::span<const Check>(&bad_policy, 1)).code(),
            ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AllAlgorithms,
    ::testing::Combine(::testing::Values(Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                         Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket,
                                         Algorithm::kGcra),
                       ::testing::ValuesIn(kShapes)),
    [](const auto& info) {
      return std::string(AlgorithmName(std::get<0>(info.param))) + "_" +
             std::to_string(std::get<1>(info.param).limit) + "_per_" +
             std::to_string(std::get<1>(info.param).window / 1000) + "ms";
    });

// ---- Fixed window -----------------------------------------------------------

// The article's finding: 100 at 12:00:59 and 100 at 12:01:00 all pass against 100/min.
TEST(FixedWindow, BoundaryBurstPassesTwiceTheLimitAsDocumented) {
  Harness h({Policy::FixedWindow("api", 100, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 59 * kSec);
  EXPECT_EQ(h.TakeN(100), 100);
  h.clock->Set(kNoon + kMin);
  EXPECT_EQ(h.TakeN(100), 100);  // 200 within one second: the boundary effect
  EXPECT_EQ(h.TakeN(1), 0);
}

TEST(FixedWindow, WindowsAlignToTheEpoch) {
  Harness h({Policy::FixedWindow("api", 3, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 20 * kSec);
  Decision d = h.Take();
  EXPECT_EQ(d.reset_after, 40 * kSec);  // the window ends at 12:01:00
}

// A refund after the window rolled over gives nothing to the new window.
TEST(FixedWindow, RefundAfterTheWindowRolledOverIsANoOp) {
  Harness h({Policy::FixedWindow("api", 5, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 50 * kSec);
  EXPECT_EQ(h.TakeN(5), 5);
  h.clock->Set(kNoon + kMin + kSec);
  EXPECT_EQ(h.TakeN(2), 2);
  ASSERT_TRUE(h.limiter->Refund("k", 5).ok());  // the new window's 2 come back, not 5
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 5u);
  EXPECT_EQ(h.TakeN(7), 5);
}

class FixedWindowBound : public ::testing::TestWithParam<Shape> {};
// In any window of the policy's length no more than 2 x limit pass.
TEST_P(FixedWindowBound, AtMostTwiceTheLimitInAnyWindow) {
  const Shape s = GetParam();
  Harness h({Policy::FixedWindow("p", s.limit, std::chrono::microseconds(s.window))});
  std::mt19937_64 rng(7);
  std::deque<Micros> allowed;
  for (int i = 0; i < 3000; ++i) {
    h.clock->Advance(static_cast<Micros>(rng() % (s.window / s.limit / 2 + 1)));
    if (h.Take().allowed) allowed.push_back(h.clock->Now());
    while (!allowed.empty() && allowed.front() <= h.clock->Now() - s.window) allowed.pop_front();
    ASSERT_LE(allowed.size(), 2 * s.limit);
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, FixedWindowBound, ::testing::ValuesIn(kShapes), ShapeName);

// ---- Sliding window log -------------------------------------------------------

class SlidingLogExact : public ::testing::TestWithParam<Shape> {};
// Never more than the limit in any window of its length, and never a wrong denial:
// compared with a brute-force log under random traffic with random costs.
TEST_P(SlidingLogExact, MatchesBruteForceLog) {
  const Shape s = GetParam();
  Harness h({Policy::SlidingWindowLog("p", s.limit, std::chrono::microseconds(s.window))});
  std::mt19937_64 rng(11);
  std::deque<std::pair<Micros, std::uint64_t>> log;
  for (int i = 0; i < 4000; ++i) {
    h.clock->Advance(static_cast<Micros>(rng() % (2 * s.window / s.limit + 1)));
    const Micros now = h.clock->Now();
    const std::uint64_t cost = 1 + rng() % std::min<std::uint64_t>(s.limit, 3);
    while (!log.empty() && log.front().first <= now - s.window) log.pop_front();
    std::uint64_t used = 0;
    for (auto& e : log) used += e.second;
    const bool expect = used + cost <= s.limit;
    Decision d = h.Take("k", cost);
    ASSERT_EQ(d.allowed, expect) << "request " << i;
    if (expect) log.emplace_back(now, cost);
    std::uint64_t after = 0;
    for (auto& e : log) after += e.second;
    ASSERT_EQ(d.remaining, s.limit - after);
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, SlidingLogExact, ::testing::ValuesIn(kShapes), ShapeName);

TEST(SlidingLog, BoundaryBurstIsStopped) {
  Harness h({Policy::SlidingWindowLog("api", 100, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 59 * kSec);
  EXPECT_EQ(h.TakeN(100), 100);
  h.clock->Set(kNoon + kMin);
  EXPECT_EQ(h.TakeN(100), 0);
  h.clock->Set(kNoon + kMin + 59 * kSec - 1);
  EXPECT_EQ(h.TakeN(100), 0);  // the 12:00:59 requests are still inside the window
  h.clock->Advance(1);         // now they are exactly one window old
  EXPECT_EQ(h.TakeN(100), 100);
}

// The newest entries go first, and an entry can be given back in part.
TEST(SlidingLog, RefundRemovesTheNewestUnits) {
  Harness h({Policy::SlidingWindowLog("api", 10, std::chrono::seconds(10))});
  ASSERT_TRUE(h.Take("k", 4).allowed);  // at 0 s
  h.clock->Advance(5 * kSec);
  ASSERT_TRUE(h.Take("k", 6).allowed);  // at 5 s
  ASSERT_TRUE(h.limiter->Refund("k", 2).ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 2u);
  // At 10 s the 4 units of 0 s leave: only the 4 left of the 5 s entry count.
  h.clock->Advance(5 * kSec);
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 6u);
  ASSERT_TRUE(h.limiter->Refund("k", 10).ok());  // everything left
  EXPECT_EQ(h.TakeN(11), 10);
}

// ---- Sliding window counter -----------------------------------------------------

// Once the window rolled over, its count is the weighted previous one: a refund then
// changes nothing.
TEST(SlidingCounter, RefundAfterTheWindowRolledOverIsANoOp) {
  Harness h({Policy::SlidingWindowCounter("api", 100, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 10 * kSec);
  EXPECT_EQ(h.TakeN(100), 100);
  h.clock->Set(kNoon + kMin + 18 * kSec);
  const std::uint64_t before = h.limiter->Peek("k")->remaining;
  ASSERT_TRUE(h.limiter->Refund("k", 50).ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, before);
  EXPECT_EQ(h.TakeN(10), 10);
  ASSERT_TRUE(h.limiter->Refund("k", 50).ok());  // gives back this window's 10 only
  EXPECT_EQ(h.limiter->Peek("k")->remaining, before);
}

TEST(SlidingCounter, WeightsThePreviousWindow) {
  Harness h({Policy::SlidingWindowCounter("api", 100, std::chrono::minutes(1))});
  h.clock->Set(kNoon + 10 * kSec);
  EXPECT_EQ(h.TakeN(100), 100);
  // 30% into the next window: estimate = 100 * 0.7 + 0 = 70, so 30 more pass.
  h.clock->Set(kNoon + kMin + 18 * kSec);
  EXPECT_EQ(h.TakeN(50), 30);
}

class SlidingCounterBound : public ::testing::TestWithParam<Shape> {};
// The counter never lets more than 2 x limit through in any window (it can only
// err where the previous window's traffic was uneven) and its estimate never exceeds
// the limit: documented bounds.
TEST_P(SlidingCounterBound, StaysWithinDocumentedBound) {
  const Shape s = GetParam();
  Harness h({Policy::SlidingWindowCounter("p", s.limit, std::chrono::microseconds(s.window))});
  std::mt19937_64 rng(5);
  std::deque<Micros> allowed;
  std::uint64_t max_in_window = 0;
  for (int i = 0; i < 5000; ++i) {
    h.clock->Advance(static_cast<Micros>(rng() % (s.window / s.limit + 1)));
    if (h.Take().allowed) allowed.push_back(h.clock->Now());
    while (!allowed.empty() && allowed.front() <= h.clock->Now() - s.window) allowed.pop_front();
    max_in_window = std::max<std::uint64_t>(max_in_window, allowed.size());
  }
  EXPECT_LE(max_in_window, 2 * s.limit);
  EXPECT_GE(max_in_window, s.limit);
}
INSTANTIATE_TEST_SUITE_P(Shapes, SlidingCounterBound, ::testing::ValuesIn(kShapes), ShapeName);

// ---- Token bucket ------------------------------------------------------------------

TEST(TokenBucket, AllowsBurstThenRate) {
  // 10 tokens, refilled at 2/s.
  Harness h({Policy::TokenBucket("b", 10, 2, std::chrono::seconds(1))});
  EXPECT_EQ(h.TakeN(15), 10);
  for (int s = 0; s < 20; ++s) {
    h.clock->Advance(kSec);
    EXPECT_EQ(h.TakeN(5), 2) << "second " << s;
  }
  // After idling it is full again, never more.
  h.clock->Advance(3600 * kSec);
  EXPECT_EQ(h.TakeN(15), 10);
}

TEST(TokenBucket, FractionalRate) {
  // 0.5 tokens per second: one request every two seconds.
  Harness h({Policy::TokenBucket("b", 1, 1, std::chrono::seconds(2))});
  EXPECT_TRUE(h.Take().allowed);
  h.clock->Advance(kSec);
  Decision d = h.Take();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kSec);
  h.clock->Advance(kSec);
  EXPECT_TRUE(h.Take().allowed);
}

TEST(TokenBucket, InitialTokens) {
  Policy p = Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1));
  p.initial_tokens = 2;
  Harness h({p});
  EXPECT_EQ(h.TakeN(10), 2);
}

// Issue #11, item 1: a new key denied because initial_tokens < cost still starts its
// bucket, which refills from then on (before: every call restarted at 0 tokens).
TEST(TokenBucket, InitialTokensBelowTheCostStillRefill) {
  Policy p = Policy::TokenBucket("b", 10, 10, std::chrono::seconds(1));
  p.initial_tokens = 0;
  Harness h({p});
  int allowed = 0;
  for (int i = 0; i < 15; ++i) {
    allowed += h.Take().allowed ? 1 : 0;
    h.clock->Advance(200'000);
  }
  EXPECT_EQ(allowed, 14);
}

// Issue #11, item 1: a bucket that refilled to full is full, whether or not the store
// dropped its state meanwhile (before: it restarted at initial_tokens).
TEST(TokenBucket, ARefilledBucketStaysFullWhenItsStateIsDropped) {
  Policy p = Policy::TokenBucket("b", 10, 10, std::chrono::seconds(1));
  p.initial_tokens = 1;
  Harness h({p});
  ASSERT_TRUE(h.Take().allowed);
  h.clock->Advance(1'500'000);  // full again after 1 s
  EXPECT_EQ(h.TakeN(11), 10);
}

// What "new" means with initial_tokens below the capacity: a bucket that has stayed
// full for a whole window starts over with initial_tokens (docs/algorithms.md).
TEST(TokenBucket, ABucketFullForAWholeWindowStartsOver) {
  Policy p = Policy::TokenBucket("b", 10, 10, std::chrono::seconds(1));
  p.initial_tokens = 2;
  Harness h({p});
  EXPECT_EQ(h.TakeN(3), 2);
  h.clock->Advance(1'000'000 + 1'000'000 - 1);  // full after 1 s, for 1 s less 1 us
  EXPECT_EQ(h.TakeN(11), 10);
  h.clock->Advance(1'000'000 + 1'000'000);  // full again at +1 s, for a whole window
  EXPECT_EQ(h.TakeN(3), 2);
}

TEST(TokenBucket, CostTakesThatManyTokens) {
  Harness h({Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1))});
  EXPECT_TRUE(h.Take("k", 7).allowed);
  Decision d = h.Take("k", 4);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 3u);
  EXPECT_EQ(d.retry_after, kSec);
  EXPECT_TRUE(h.Take("k", 3).allowed);
}

TEST(TokenBucket, RefundIsCappedAtTheCapacity) {
  Harness h({Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1))});
  ASSERT_TRUE(h.Take("k", 7).allowed);
  h.clock->Advance(2 * kSec);  // 5 tokens
  ASSERT_TRUE(h.limiter->Refund("k", 3).ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 8u);
  ASSERT_TRUE(h.limiter->Refund("k", 9).ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 10u);
}

// ---- GCRA ----------------------------------------------------------------------------

// The TAT moves back by the emission interval per unit, never before now.
TEST(Gcra, RefundMovesTheTatBackNeverBeforeNow) {
  Harness h({Policy::Gcra("g", 10, std::chrono::seconds(1), 5)});
  EXPECT_EQ(h.TakeN(5), 5);  // TAT = now + 500 ms
  ASSERT_TRUE(h.limiter->Refund("k", 2).ok());
  Decision d = *h.limiter->Peek("k");
  EXPECT_EQ(d.remaining, 2u);
  EXPECT_EQ(d.reset_after, 300'000);
  ASSERT_TRUE(h.limiter->Refund("k", 5).ok());
  d = *h.limiter->Peek("k");
  EXPECT_EQ(d.remaining, 5u);
  EXPECT_EQ(d.reset_after, 0);
  EXPECT_EQ(h.TakeN(6), 5);
}

TEST(Gcra, SpacesRequestsAtTheRate) {
  // 10/s with no burst beyond one: one request per 100 ms.
  Harness h({Policy::Gcra("g", 10, std::chrono::seconds(1), 1)});
  EXPECT_TRUE(h.Take().allowed);
  for (int i = 0; i < 50; ++i) {
    Decision d = h.Take();
    ASSERT_FALSE(d.allowed);
    h.clock->Advance(d.retry_after);
    ASSERT_TRUE(h.Take().allowed);
    EXPECT_EQ(d.retry_after, 100'000) << i;
  }
}

TEST(Gcra, BurstThenRate) {
  Harness h({Policy::Gcra("g", 10, std::chrono::seconds(1), 5)});
  EXPECT_EQ(h.TakeN(8), 5);
  h.clock->Advance(kSec);
  EXPECT_EQ(h.TakeN(20), 5);  // refilled 10 but capped at the burst of 5
}

}  // namespace
}  // namespace sluice::testing

namespace sluice::core {
namespace {

// The operations table (core/algorithm_ops.h): one complete entry per word algorithm,
// none for the two algorithms with state of their own shape.
TEST(AlgorithmOps, EveryWordAlgorithmHasAllItsOperations) {
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter,
                      Algorithm::kTokenBucket, Algorithm::kGcra}) {
    const WordOps* ops = WordOpsOf(a);
    ASSERT_NE(ops, nullptr) << AlgorithmName(a);
    EXPECT_TRUE(ops->decide && ops->refund && ops->penalize && ops->carry) << AlgorithmName(a);
  }
  EXPECT_EQ(WordOpsOf(Algorithm::kSlidingWindowLog), nullptr);
  EXPECT_EQ(WordOpsOf(Algorithm::kConcurrency), nullptr);
  EXPECT_EQ(WordOpsOf(static_cast<Algorithm>(6)), nullptr);
}

}  // namespace
}  // namespace sluice::core
