// One conformance suite, run against both stores: whatever a user can observe through
// the Limiter must not depend on where the state lives.
#include <gtest/gtest.h>

#include "store_backends.h"

namespace sluice::testing {
namespace {

template <typename Backend>
class StoreConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = Backend::Make();
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<Limiter> Make(std::vector<Policy> policies) {
    LimiterOptions o;
    o.policies = std::move(policies);
    o.store = store_;
    o.clock = clock_;
    o.deny_cache = false;  // every decision must come from the store under test
    auto r = Limiter::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }

  static Decision Take(Limiter& l, std::string_view key, std::uint64_t cost = 1) {
    auto r = l.Acquire(key, cost);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.ok() ? r->source : DecisionSource::kStore, DecisionSource::kStore);
    return r.ok() ? *r : Decision{};
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(kNoon);
};

#ifdef SLUICE_TESTS_ON_CLUSTER
using Backends = ::testing::Types<RedisBackend>;  // the cluster (tests/cluster)
#else
using Backends = ::testing::Types<SLUICE_SUITE_BACKENDS>;
#endif
struct BackendName {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};
TYPED_TEST_SUITE(StoreConformance, Backends, BackendName);

std::vector<Policy> AllAlgorithms(std::uint64_t limit, Micros window) {
  const auto w = std::chrono::microseconds(window);
  return {Policy::FixedWindow("fixed", limit, w), Policy::SlidingWindowLog("log", limit, w),
          Policy::SlidingWindowCounter("counter", limit, w),
          Policy::TokenBucket("bucket", limit, limit, w), Policy::Gcra("gcra", limit, w, limit)};
}

TYPED_TEST(StoreConformance, FixedWindowAllowsTheLimitThenWaitsForTheNextWindow) {
  auto l = this->Make({Policy::FixedWindow("api", 3, std::chrono::minutes(1))});
  this->clock_->Advance(10 * kSec);
  for (int i = 0; i < 3; ++i) {
    Decision d = this->Take(*l, "user:1");
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2u - i);
    EXPECT_EQ(d.reset_after, 50 * kSec);
  }
  Decision d = this->Take(*l, "user:1");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 50 * kSec);
  EXPECT_TRUE(this->Take(*l, "user:2").allowed) << "keys are independent";
  this->clock_->Advance(50 * kSec);
  EXPECT_TRUE(this->Take(*l, "user:1").allowed);
}

TYPED_TEST(StoreConformance, EveryAlgorithmAllowsItsCapacityThenDeniesUntilRetryAfter) {
  for (const Policy& p : AllAlgorithms(5, 10 * kSec)) {
    SCOPED_TRACE(p.name);
    auto l = this->Make({p});
    const std::string key = "k-" + p.name;
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(this->Take(*l, key).allowed) << i;
    Decision d = this->Take(*l, key);
    ASSERT_FALSE(d.allowed);
    EXPECT_GT(d.retry_after, 0);
    EXPECT_EQ(d.remaining, 0u);
    this->clock_->Advance(d.retry_after - 1);
    EXPECT_FALSE(this->Take(*l, key).allowed) << "one microsecond early";
    this->clock_->Advance(1);
    EXPECT_TRUE(this->Take(*l, key).allowed) << "at retry_after";
    this->clock_->Advance(20 * kSec);
  }
}

TYPED_TEST(StoreConformance, DeniedRequestsAreNotRecorded) {
  auto l = this->Make({Policy::SlidingWindowLog("log", 3, std::chrono::seconds(10))});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(this->Take(*l, "k").allowed);
  this->clock_->Advance(5 * kSec);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(this->Take(*l, "k").allowed);
  this->clock_->Advance(5 * kSec);  // the three accepted ones leave the window
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(this->Take(*l, "k").allowed) << i;
  EXPECT_FALSE(this->Take(*l, "k").allowed);
}

TYPED_TEST(StoreConformance, SeveralLimitsAreAllOrNothing) {
  auto l = this->Make({Policy::FixedWindow("minute", 5, std::chrono::minutes(1)),
                       Policy::TokenBucket("burst", 2, 1, std::chrono::minutes(1)),
                       Policy::SlidingWindowLog("log", 4, std::chrono::minutes(1))});
  EXPECT_TRUE(this->Take(*l, "k").allowed);
  EXPECT_TRUE(this->Take(*l, "k").allowed);
  Decision per[3];
  auto d = l->Acquire("k", 1, per);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->policy_index, 1) << "the bucket is the binding limit";
  auto peek = l->Peek("k", per);
  ASSERT_TRUE(peek.ok());
  EXPECT_EQ(per[0].remaining, 3u) << "the denied call consumed nothing from the window";
  EXPECT_EQ(per[2].remaining, 2u) << "nor from the log";
}

TYPED_TEST(StoreConformance, PeekConsumesNothing) {
  for (const Policy& p : AllAlgorithms(3, 10 * kSec)) {
    SCOPED_TRACE(p.name);
    auto l = this->Make({p});
    for (int i = 0; i < 10; ++i) {
      auto d = l->Peek("k");
      ASSERT_TRUE(d.ok());
      EXPECT_TRUE(d->allowed);
      EXPECT_EQ(d->remaining, 3u);
    }
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(this->Take(*l, "k").allowed);
    auto d = l->Peek("k");
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->allowed);
    EXPECT_GT(d->retry_after, 0);
    this->clock_->Advance(20 * kSec);
  }
}

TYPED_TEST(StoreConformance, CostsAreWeightsAndImpossibleCostsAreErrors) {
  for (const Policy& p : AllAlgorithms(10, 10 * kSec)) {
    SCOPED_TRACE(p.name);
    auto l = this->Make({p});
    EXPECT_TRUE(this->Take(*l, "k", 7).allowed);
    EXPECT_FALSE(this->Take(*l, "k", 4).allowed);
    Decision d = this->Take(*l, "k", 3);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    auto bad = l->Acquire("k", 11);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("capacity"), std::string::npos);
    this->clock_->Advance(20 * kSec);
  }
}

TYPED_TEST(StoreConformance, ResetMakesTheFullLimitAvailable) {
  for (const Policy& p : AllAlgorithms(2, 60 * kSec)) {
    SCOPED_TRACE(p.name);
    auto l = this->Make({p});
    EXPECT_TRUE(this->Take(*l, "k").allowed);
    EXPECT_TRUE(this->Take(*l, "k").allowed);
    EXPECT_FALSE(this->Take(*l, "k").allowed);
    ASSERT_TRUE(l->Reset("k").ok());
    EXPECT_TRUE(this->Take(*l, "k").allowed);
    EXPECT_TRUE(this->Take(*l, "k").allowed);
    EXPECT_FALSE(this->Take(*l, "k").allowed);
  }
}

TYPED_TEST(StoreConformance, TimeGoingBackwardsMintsNothing) {
  for (const Policy& p : AllAlgorithms(4, 60 * kSec)) {
    SCOPED_TRACE(p.name);
    auto l = this->Make({p});
    this->clock_->Advance(30 * kSec);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(this->Take(*l, "k").allowed);
    this->clock_->Advance(-20 * kSec);
    EXPECT_FALSE(this->Take(*l, "k").allowed);
    this->clock_->Advance(-60 * kSec);
    EXPECT_FALSE(this->Take(*l, "k").allowed);
    this->clock_->Advance(200 * kSec);
  }
}

TYPED_TEST(StoreConformance, KeysThatLookAlikeStayApart) {
  auto l = this->Make({Policy::FixedWindow("api", 1, std::chrono::minutes(1))});
  const char* keys[] = {"a:b", "a}b", "a{b}", "{a}:b", "a%3Ab", "a b", "a\nb", "\xff\xfe"};
  for (const char* k : keys) EXPECT_TRUE(this->Take(*l, k).allowed) << k;
  for (const char* k : keys) EXPECT_FALSE(this->Take(*l, k).allowed) << k;
}

TYPED_TEST(StoreConformance, SlidingCounterWeighsThePreviousWindow) {
  auto l = this->Make({Policy::SlidingWindowCounter("c", 10, std::chrono::seconds(10))});
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(this->Take(*l, "k").allowed);
  this->clock_->Advance(13 * kSec);  // 30% into the next window: 70% of 10 still count
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += this->Take(*l, "k").allowed ? 1 : 0;
  EXPECT_EQ(allowed, 3);
}

}  // namespace
}  // namespace sluice::testing
