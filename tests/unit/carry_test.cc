// Carry-over (Policy::on_change, issue #12 item 4): a policy whose limit, window or
// burst changes under the same name meets the keys' states written under the old
// parameters. Each mode and algorithm on a MemoryStore shared by an "old" and a "new"
// Limiter (an application restarted with a changed Policy), on a manual clock.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "core/algorithms.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

using std::chrono::seconds;
constexpr Micros kT0 = 1'785'412'800'000'000;  // an hour boundary

class CarryTest : public ::testing::Test {
 protected:
  std::unique_ptr<Limiter> Make(Policy p) {
    LimiterOptions o;
    o.policies = {std::move(p)};
    o.store = store;
    o.clock = clock;
    auto l = Limiter::Create(std::move(o));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(*l) : nullptr;
  }
  // Takes `n` units from "k" under `p` (all must pass).
  void Use(const Policy& p, std::uint64_t n) {
    auto l = Make(p);
    auto d = l->Acquire("k", n);
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(d->allowed);
  }
  // What "k" has left under `p` (a peek: nothing consumed, nothing written).
  std::uint64_t Remaining(const Policy& p) {
    auto l = Make(p);
    auto d = l->Peek("k");
    EXPECT_TRUE(d.ok());
    return d.ok() ? d->remaining : 0;
  }
  // How many single units "k" can take under `p` now.
  int Takes(const Policy& p, int max) {
    auto l = Make(p);
    int n = 0;
    for (int i = 0; i < max; ++i) {
      auto d = l->Acquire("k");
      if (d.ok() && d->allowed) ++n;
    }
    return n;
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kT0 + 1000);
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
};

Policy With(Policy p, OnChange m) {
  p.on_change = m;
  return p;
}

TEST(OnChangeNames, ParseAndName) {
  for (OnChange m : {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs}) {
    auto parsed = ParseOnChange(OnChangeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParseOnChange("keep");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown on_change mode 'keep'"), std::string::npos);
  EXPECT_EQ(Policy{}.on_change, OnChange::kAsIs);  // the default: what earlier releases did
}

TEST(OnChangeValidation, SlidingLogOnlyAsIs) {
  Policy p = Policy::SlidingWindowLog("log", 10, seconds(1));
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.on_change = OnChange::kProportional;
  Status s = ValidatePolicy(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("on_change proportional does not apply to sliding_window_log"),
            std::string::npos)
      << s.message();
  p.on_change = static_cast<OnChange>(9);
  EXPECT_NE(ValidatePolicy(p).message().find("on_change is not a known mode"), std::string::npos);
}

// Window algorithms: 50 of 100 used, the limit becomes 200.
TEST_F(CarryTest, FixedWindowModes) {
  for (OnChange m : {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs}) {
    store = std::make_shared<MemoryStore>();
    const Policy v1 = With(Policy::FixedWindow("api", 100, seconds(60)), m);
    const Policy v2 = With(Policy::FixedWindow("api", 200, seconds(60)), m);
    Use(v1, 50);
    const std::uint64_t want = m == OnChange::kReset          ? 200
                               : m == OnChange::kProportional ? 100
                                                              : 150;
    EXPECT_EQ(Remaining(v2), want) << OnChangeName(m);
    EXPECT_EQ(Takes(v2, 300), static_cast<int>(want)) << OnChangeName(m);
    // Back to the old limit: the state now records 200, so it is converted again.
    if (m == OnChange::kProportional) {
      EXPECT_EQ(Remaining(v1), 0u);
    }
  }
}

// A bug found by the differential test: under as_is (the default, and what earlier
// releases did) a limit decreased below the used count made the in-process store
// report remaining = limit - count wrapped around (18446744073709551613 for 8 used of a
// new limit of 5); the Redis reply decoder clamped it to 0.
TEST_F(CarryTest, AsIsLimitDecreaseBelowTheCountLeavesNothing) {
  for (const Policy& v1 : {Policy::FixedWindow("api", 10, seconds(60)),
                           Policy::SlidingWindowLog("api", 10, seconds(60))}) {
    store = std::make_shared<MemoryStore>();
    Policy v2 = v1;
    v2.limit = 5;
    Use(v1, 8);
    EXPECT_EQ(Remaining(v2), 0u) << AlgorithmName(v1.algorithm);
    auto l = Make(v2);
    auto d = l->Acquire("k");
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->remaining, 0u) << AlgorithmName(v1.algorithm);
  }
}

TEST_F(CarryTest, FixedWindowProportionalDownRoundsUsedUp) {
  const Policy v1 = With(Policy::FixedWindow("api", 3, seconds(60)), OnChange::kProportional);
  const Policy v2 = With(Policy::FixedWindow("api", 2, seconds(60)), OnChange::kProportional);
  Use(v1, 1);                    // 1/3 used
  EXPECT_EQ(Remaining(v2), 1u);  // ceil(2/3) = 1 used of 2: never more than was allowed
}

TEST_F(CarryTest, WindowChangeResetsProportionalWindowAlgorithms) {
  const Policy v1 =
      With(Policy::SlidingWindowCounter("api", 100, seconds(60)), OnChange::kProportional);
  const Policy v2 =
      With(Policy::SlidingWindowCounter("api", 100, seconds(30)), OnChange::kProportional);
  Use(v1, 80);
  EXPECT_EQ(Remaining(v2), 100u);
}

TEST_F(CarryTest, SlidingCounterModes) {
  for (OnChange m : {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs}) {
    store = std::make_shared<MemoryStore>();
    clock->Set(kT0 + 1000);
    const Policy v1 = With(Policy::SlidingWindowCounter("api", 10, seconds(10)), m);
    const Policy v2 = With(Policy::SlidingWindowCounter("api", 20, seconds(10)), m);
    Use(v1, 4);
    // Half of the next window: the previous window's 4 weigh 2.
    clock->Set(kT0 + 15'000'000);
    Use(v1, 2);  // estimate 2 + 2 = 4 used of 10
    const std::uint64_t want = m == OnChange::kReset ? 20 : m == OnChange::kProportional ? 12 : 16;
    EXPECT_EQ(Remaining(v2), want) << OnChangeName(m);
  }
}

// The in-process store keeps a sliding counter's parameters id in the top bits of its
// previous count: counts up to the largest limit (10^12) stay exact.
TEST_F(CarryTest, SlidingCounterLargestCountsKeepTheirRecord) {
  const Policy v1 = With(Policy::SlidingWindowCounter("api", 1'000'000'000'000, seconds(10)),
                         OnChange::kProportional);
  const Policy v2 = With(Policy::SlidingWindowCounter("api", 500'000'000'000, seconds(10)),
                         OnChange::kProportional);
  Use(v1, 999'999'999'999);
  clock->Set(kT0 + 10'000'000);  // the next window's start: the count is the previous one
  Use(v1, 1);
  EXPECT_EQ(Remaining(v1), 0u);
  clock->Advance(5'000'000);  // half of it weighs 499,999,999,999.5 + 1
  EXPECT_EQ(Remaining(v1), 499'999'999'999u);
  EXPECT_EQ(Remaining(v2), 249'999'999'999u);  // ceil(prev / 2) / 2 + ceil(1 / 2)
}

// Token bucket: 100 tokens of capacity, 50 used; the capacity becomes 200.
TEST_F(CarryTest, TokenBucketModes) {
  for (OnChange m : {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs}) {
    store = std::make_shared<MemoryStore>();
    const Policy v1 = With(Policy::TokenBucket("api", 100, 100, seconds(3600)), m);
    const Policy v2 = With(Policy::TokenBucket("api", 200, 200, seconds(3600)), m);
    Use(v1, 50);
    const std::uint64_t want = m == OnChange::kReset          ? 200
                               : m == OnChange::kProportional ? 100
                                                              : 50;
    EXPECT_EQ(Remaining(v2), want) << OnChangeName(m);
  }
  // as_is caps the tokens at a smaller capacity.
  store = std::make_shared<MemoryStore>();
  const Policy big = With(Policy::TokenBucket("api", 100, 100, seconds(3600)), OnChange::kAsIs);
  const Policy small = With(Policy::TokenBucket("api", 20, 20, seconds(3600)), OnChange::kAsIs);
  Use(big, 10);
  EXPECT_EQ(Remaining(small), 20u);
}

TEST_F(CarryTest, TokenBucketProportionalRefillsAtTheOldRateFirst) {
  // 10 tokens, refilled at 1/s; 10 used; 5 s later the bucket holds 5 (old rate),
  // then the capacity becomes 20 (and the rate 20/10s = 2/s): 10 tokens.
  const Policy v1 = With(Policy::TokenBucket("api", 10, 10, seconds(10)), OnChange::kProportional);
  const Policy v2 = With(Policy::TokenBucket("api", 20, 20, seconds(10)), OnChange::kProportional);
  Use(v1, 10);
  clock->Advance(5'000'000);
  EXPECT_EQ(Remaining(v2), 10u);
}

// GCRA: 100/s with a burst of 100 (tau 1 s), 50 used; the burst becomes 200 (tau 2 s).
TEST_F(CarryTest, GcraModes) {
  for (OnChange m : {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs}) {
    store = std::make_shared<MemoryStore>();
    const Policy v1 = With(Policy::Gcra("api", 100, seconds(1), 100), m);
    const Policy v2 = With(Policy::Gcra("api", 100, seconds(1), 200), m);
    Use(v1, 50);
    // as_is keeps the TAT: 0.5 s of debt is still 50 units at 100/s.
    const std::uint64_t want = m == OnChange::kReset          ? 200
                               : m == OnChange::kProportional ? 100
                                                              : 150;
    EXPECT_EQ(Remaining(v2), want) << OnChangeName(m);
  }
}

// Changing only the rate of a token bucket keeps its tokens under proportional (the
// capacity did not change); reset gives a full bucket.
TEST_F(CarryTest, TokenBucketRateOnlyChange) {
  const Policy v1 =
      With(Policy::TokenBucket("api", 10, 10, seconds(3600)), OnChange::kProportional);
  const Policy v2 = With(Policy::TokenBucket("api", 10, 5, seconds(3600)), OnChange::kProportional);
  Use(v1, 6);
  EXPECT_EQ(Remaining(v2), 4u);
}

// A state written without parameters (a kAsIs policy, or an earlier release) is taken
// as written under the new ones; the first write by a policy with a mode records them.
TEST_F(CarryTest, PlainStateIsTakenAsIsThenRecorded) {
  const Policy plain = Policy::FixedWindow("api", 100, seconds(60));
  const Policy v1 = With(Policy::FixedWindow("api", 100, seconds(60)), OnChange::kProportional);
  const Policy v2 = With(Policy::FixedWindow("api", 200, seconds(60)), OnChange::kProportional);
  Use(plain, 50);
  EXPECT_EQ(Remaining(v2), 150u);  // no record: as it is
  Use(v1, 10);                     // 60 of 100, recorded
  EXPECT_EQ(Remaining(v2), 80u);   // 120 of 200
  // A kAsIs policy reads a recorded state as it is, and its write drops the record.
  EXPECT_EQ(Remaining(plain), 40u);
  Use(plain, 1);
  EXPECT_EQ(Remaining(v2), 139u);  // 61 used, no record any more
}

// A denied request converts nothing for good: the conversion is applied each time
// until a request commits.
TEST_F(CarryTest, DeniedRequestKeepsTheOldState) {
  const Policy v1 = With(Policy::FixedWindow("api", 10, seconds(60)), OnChange::kProportional);
  const Policy v2 = With(Policy::FixedWindow("api", 4, seconds(60)), OnChange::kProportional);
  Use(v1, 10);
  EXPECT_EQ(Takes(v2, 3), 0);
  EXPECT_EQ(Remaining(v1), 0u);
}

// Refunds: a state recorded under the policy's own parameters is refunded; one written
// under others gives nothing back.
TEST_F(CarryTest, RefundsNeedTheStatesOwnParameters) {
  const Policy v1 = With(Policy::FixedWindow("api", 10, seconds(60)), OnChange::kReset);
  const Policy v2 = With(Policy::FixedWindow("api", 20, seconds(60)), OnChange::kReset);
  Use(v1, 6);
  {
    auto l = Make(v1);
    ASSERT_TRUE(l->Refund("k", 2).ok());
  }
  EXPECT_EQ(Remaining(v1), 6u);
  {
    auto l = Make(v2);
    ASSERT_TRUE(l->Refund("k", 2).ok());
  }
  EXPECT_EQ(Remaining(v1), 6u);
  EXPECT_EQ(Remaining(v2), 20u);
}

// The core conversions, on their own.
TEST(CarryCore, Conversions) {
  core::WrittenUnder old{100, 60'000'000, 100};
  Policy p = Policy::FixedWindow("x", 200, seconds(60));
  core::FixedWindowState f{0, 50};
  ASSERT_TRUE(core::CarryFixedWindow(p, old, &f));
  EXPECT_EQ(f.count, 100u);
  p.window = 30'000'000;
  EXPECT_FALSE(core::CarryFixedWindow(p, old, &f));
  Policy g = Policy::Gcra("g", 100, seconds(1), 200);
  core::GcraState s{1'000'000 + 500'000};
  ASSERT_TRUE(core::CarryGcra(g, core::WrittenUnder{100, 1'000'000, 100}, 1'000'000, &s));
  EXPECT_DOUBLE_EQ(s.tat, 2'000'000);
  EXPECT_TRUE(core::SameParams(g, core::ParamsOf(g)));
}

}  // namespace
}  // namespace sluice
