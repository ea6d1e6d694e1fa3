#include <gtest/gtest.h>

#include "test_util.h"

namespace sluice::testing {
namespace {

// A store that fails every call, to exercise the failure modes.
class BrokenStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision>) override {
    (void)batch;
    ++calls;
    return Status::Unavailable("redis is down");
  }
  Status Reset(const Policy&, std::string_view) override { return Status::Unavailable("down"); }
  bool IsRemote() const override { return true; }
  int calls = 0;
};

// Wraps a MemoryStore, pretends to be remote and counts calls (for the deny cache).
class CountingRemoteStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    ++calls;
    return inner.Run(batch, out);
  }
  Status Reset(const Policy& p, std::string_view k) override { return inner.Reset(p, k); }
  bool IsRemote() const override { return true; }
  MemoryStore inner;
  int calls = 0;
};

TEST(Limiter, CreateValidates) {
  LimiterOptions o;
  EXPECT_EQ(Limiter::Create(o).status().code(), ErrorCode::kInvalidArgument);
  o.policies = {Policy::FixedWindow("a", 1, std::chrono::seconds(1)),
                Policy::FixedWindow("a", 2, std::chrono::seconds(1))};
  auto r = Limiter::Create(o);
  EXPECT_NE(r.status().message().find("used twice"), std::string::npos);
  o.policies.pop_back();
  o.key_prefix = "bad{prefix}";
  EXPECT_NE(Limiter::Create(o).status().message().find("key_prefix"), std::string::npos);
  o.key_prefix = "ok";
  o.policies[0].limit = 0;
  EXPECT_NE(Limiter::Create(o).status().message().find("limit"), std::string::npos);
}

TEST(Limiter, CostAboveCapacityIsInvalidNotDenied) {
  Harness h({Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1))});
  auto r = h.limiter->Acquire("k", 11);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("capacity 10"), std::string::npos);
  EXPECT_TRUE(h.limiter->Acquire("k", 10)->allowed);
}

TEST(Limiter, BadKeys) {
  Harness h({Policy::FixedWindow("p", 1, std::chrono::seconds(1))});
  EXPECT_EQ(h.limiter->Acquire("").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Acquire(std::string(300, 'a')).status().code(), ErrorCode::kInvalidArgument);
}

// "10/s and 20/min": all pass and are consumed, or none is.
TEST(Limiter, SeveralLimitsAreAllOrNothing) {
  Harness h({Policy::FixedWindow("second", 10, std::chrono::seconds(1)),
             Policy::FixedWindow("minute", 20, std::chrono::minutes(1))});
  Decision per[2];
  EXPECT_EQ(h.TakeN(15), 10);
  h.clock->Advance(kSec);
  EXPECT_EQ(h.TakeN(15), 10);
  h.clock->Advance(kSec);
  auto d = h.limiter->Acquire("k", 1, per);
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->policy_index, 1);  // the minute limit binds
  EXPECT_TRUE(per[0].allowed);
  EXPECT_FALSE(per[1].allowed);
  // The per-second limit was not consumed by the denied request.
  EXPECT_EQ(h.limiter->Peek("k", per)->allowed, false);
  EXPECT_EQ(per[0].remaining, 10u);
}

TEST(Limiter, ChecksWithDifferentKeysAreAtomic) {
  Harness h({Policy::FixedWindow("user", 5, std::chrono::minutes(1)),
             Policy::FixedWindow("ip", 3, std::chrono::minutes(1))});
  Check checks[] = {{0, "alice", 1}, {1, "10.0.0.1", 1}};
  int ok = 0;
  for (int i = 0; i < 10; ++i) ok += h.limiter->Acquire(checks)->allowed;
  EXPECT_EQ(ok, 3);
  Decision per[2];
  h.limiter->Peek("alice", per);
  EXPECT_EQ(per[0].remaining, 2u);  // only the 3 allowed ones were consumed
  Check dup[] = {{0, "a", 1}, {0, "a", 1}};
  EXPECT_EQ(h.limiter->Acquire(dup).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Limiter, ShadowModeReportsButAllows) {
  Harness h({Policy::FixedWindow("p", 2, std::chrono::minutes(1))}, /*shadow=*/true);
  EXPECT_EQ(h.TakeN(5), 5);
  Decision d = h.Take();
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.shadow_denied);
  EXPECT_EQ(h.limiter->Stats().shadow_denied, 4u);
  EXPECT_EQ(h.limiter->Stats().denied, 0u);
}

TEST(Limiter, FailureModes) {
  for (FailureMode m : {FailureMode::kFailOpen, FailureMode::kFailClosed}) {
    Policy p = Policy::FixedWindow("p", 2, std::chrono::minutes(1));
    p.failure_mode = m;
    LimiterOptions o;
    o.policies = {p};
    o.store = std::make_shared<BrokenStore>();
    auto limiter = std::move(Limiter::Create(o)).value();
    auto d = limiter->Acquire("k");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->allowed, m == FailureMode::kFailOpen);
    EXPECT_EQ(d->source, m == FailureMode::kFailOpen ? DecisionSource::kFailOpen
                                                     : DecisionSource::kFailClosed);
    LimiterStats s = limiter->Stats();
    EXPECT_EQ(s.store_errors, 1u);
    EXPECT_EQ(s.fail_open, m == FailureMode::kFailOpen ? 1u : 0u);
    EXPECT_EQ(s.fail_closed, m == FailureMode::kFailClosed ? 1u : 0u);
  }
}

TEST(Limiter, LocalFallbackDividesTheLimit) {
  Policy p = Policy::FixedWindow("p", 100, std::chrono::minutes(1));
  p.failure_mode = FailureMode::kLocalFallback;
  p.fallback_divisor = 4;
  LimiterOptions o;
  o.policies = {p};
  o.store = std::make_shared<BrokenStore>();
  o.clock = std::make_shared<ManualClock>(kNoon);
  auto limiter = std::move(Limiter::Create(o)).value();
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    auto d = limiter->Acquire("k");
    EXPECT_EQ(d->source, DecisionSource::kLocalFallback);
    ok += d->allowed;
  }
  EXPECT_EQ(ok, 25);
  EXPECT_EQ(limiter->Stats().local_fallback, 40u);
}

TEST(Limiter, DenyCacheSavesStoreCallsWithoutChangingDecisions) {
  auto store = std::make_shared<CountingRemoteStore>();
  auto clock = std::make_shared<ManualClock>(kNoon);
  LimiterOptions o;
  o.policies = {Policy::FixedWindow("p", 10, std::chrono::seconds(1))};
  o.store = store;
  o.clock = clock;
  auto limiter = std::move(Limiter::Create(o)).value();
  int ok = 0;
  for (int i = 0; i < 1000; ++i) ok += limiter->Acquire("attacker")->allowed;
  EXPECT_EQ(ok, 10);
  EXPECT_EQ(store->calls, 11);  // 10 allowed + the first denial
  EXPECT_EQ(limiter->Stats().deny_cache_hits, 989u);
  // At the retry time the store is asked again and the key passes.
  clock->Advance(kSec);
  EXPECT_TRUE(limiter->Acquire("attacker")->allowed);
  EXPECT_EQ(store->calls, 12);
  // Reset clears the cached denial too.
  for (int i = 0; i < 20; ++i) limiter->Acquire("attacker");
  ASSERT_TRUE(limiter->Reset("attacker").ok());
  EXPECT_TRUE(limiter->Acquire("attacker")->allowed);
}

}  // namespace
}  // namespace sluice::testing

namespace sluice::testing {
namespace {

// A shadow policy that would deny must not stop an enforced policy of the same
// request from being charged (they used to share one all-or-nothing batch).
TEST(Limiter, ShadowDenialDoesNotStopEnforcedPoliciesFromCounting) {
  Policy shadow = Policy::FixedWindow("trial", 2, std::chrono::minutes(1));
  shadow.shadow = true;
  Harness h({Policy::FixedWindow("enforced", 5, std::chrono::minutes(1)), shadow});
  Decision per[2];
  for (int i = 0; i < 5; ++i) {
    auto d = h.limiter->Acquire("k", 1, per);
    ASSERT_TRUE(d->allowed) << i;
    EXPECT_EQ(per[0].remaining, static_cast<std::uint64_t>(4 - i)) << i;
    EXPECT_EQ(per[1].shadow_denied, i >= 2) << i;
  }
  auto d = h.limiter->Acquire("k", 1, per);
  EXPECT_FALSE(d->allowed);  // the enforced limit of 5 holds
  EXPECT_EQ(d->policy_index, 0);
  EXPECT_TRUE(per[1].shadow_denied);
  EXPECT_EQ(h.limiter->Stats().shadow_denied, 4u);
  EXPECT_EQ(h.limiter->Stats().denied, 1u);
}

}  // namespace
}  // namespace sluice::testing
