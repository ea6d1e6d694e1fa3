// Hot-key leases (Policy::lease) on the in-process store, on a ManualClock: local
// decisions, sizes, validity, window ends, returns, and what is never leased.
#include "decide/lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "decide/decider.h"
#include "sluice/key.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

// A MemoryStore that counts the calls made to it.
class CountingStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    const std::span<const StoreCheck> checks = batch.checks;
    evaluations++;
    for (const StoreCheck& c : checks) evaluated_units += c.cost;
    return inner.Run(batch, out);
  }
  Status Refund(std::span<const StoreCheck> checks, Micros now) {
    refunds++;
    for (const StoreCheck& c : checks) refunded_units += c.cost;
    return inner.Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
  }
  Status Reset(const Policy& p, std::string_view key) override { return inner.Reset(p, key); }

  MemoryStore inner;
  std::atomic<long> evaluations{0}, refunds{0}, evaluated_units{0}, refunded_units{0};
};

struct LeaseHarness {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<CountingStore> store = std::make_shared<CountingStore>();
  std::unique_ptr<Limiter> limiter;

  explicit LeaseHarness(std::vector<Policy> policies) {
    LimiterOptions o;
    o.policies = std::move(policies);
    o.store = store;
    o.clock = clock;
    auto r = Limiter::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    limiter = std::move(r).value();
  }
  Decision Take(std::string_view key = "k", std::uint64_t cost = 1) {
    auto r = limiter->Acquire(key, cost);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Decision{};
  }
  // What remains for `key` in the store, asked without a lease.
  std::uint64_t StoreRemaining(const Policy& leased, std::string_view key = "k") {
    Policy p = leased;
    p.lease = 0;
    const std::string k = *StoreKey("sluice", key, p.name);
    StoreCheck c{.policy = &p, .key = k, .cost = 0};
    Decision d;
    EXPECT_TRUE(store->inner
                    .Run({.checks = std::span<const StoreCheck>(&c, 1), .now = clock->Now()},
                         std::span<Decision>(&d, 1))
                    .ok());
    return d.remaining;
  }
};

Policy Leased(Policy p, std::uint64_t lease, Micros validity = 0) {
  p.lease = lease;
  p.lease_validity = validity;
  return p;
}

TEST(LeasePolicy, ValidationNamesTheField) {
  using std::chrono::seconds;
  Policy log = Leased(Policy::SlidingWindowLog("log", 100, seconds(1)), 10);
  EXPECT_NE(ValidatePolicy(log).message().find("sliding_window_log"), std::string::npos);
  Policy big = Leased(Policy::FixedWindow("fw", 100, seconds(1)), 101);
  EXPECT_NE(ValidatePolicy(big).message().find("lease (101) must not exceed"), std::string::npos);
  Policy longv = Leased(Policy::FixedWindow("fw", 100, seconds(1)), 10, 100'001);
  EXPECT_NE(ValidatePolicy(longv).message().find("lease_validity"), std::string::npos);
  EXPECT_TRUE(ValidatePolicy(Leased(Policy::FixedWindow("fw", 100, seconds(1)), 10, 100'000)).ok());
  EXPECT_TRUE(ValidatePolicy(Leased(Policy::Gcra("g", 100, seconds(1), 20), 20)).ok());
}

// One process, one fixed window: exactly `limit` pass (a lease never over-admits a
// fixed window), with far fewer store calls than decisions.
TEST(Lease, FixedWindowIsExactWithFewStoreCalls) {
  const Policy p = Leased(Policy::FixedWindow("fw", 1000, std::chrono::minutes(1)), 100);
  LeaseHarness h({p});
  int allowed = 0;
  for (int i = 0; i < 1500; ++i) allowed += h.Take().allowed ? 1 : 0;
  EXPECT_EQ(allowed, 1000);
  // Leases grow 1, 4, 16, 64, then 100 (capped also by half the store's remaining):
  // a few dozen calls for 1000 allowed, plus one call per denial after the limit.
  EXPECT_LT(h.store->evaluations.load(), 50 + 2 * 500);
  const LimiterStats st = h.limiter->Stats();
  EXPECT_GT(st.lease_hits, 900u);
  EXPECT_GT(st.lease_grants, 4u);
  EXPECT_EQ(h.StoreRemaining(p), 0u);
}

TEST(Lease, LocalDecisionsSayLeaseAndCountDown) {
  const Policy p = Leased(Policy::Gcra("g", 1000, std::chrono::seconds(1), 1000), 100);
  LeaseHarness h({p});
  Decision first = h.Take();
  EXPECT_EQ(first.source, DecisionSource::kStore);
  EXPECT_EQ(first.remaining, 999u);
  Decision second = h.Take();  // a new lease (4 units) taken from the store
  EXPECT_EQ(second.source, DecisionSource::kStore);
  EXPECT_EQ(second.remaining, 998u);
  Decision third = h.Take();
  EXPECT_EQ(third.source, DecisionSource::kLease);
  EXPECT_EQ(third.remaining, 997u);
  EXPECT_TRUE(third.allowed);
  EXPECT_EQ(third.limit, 1000u);
}

// Grows a lease of `p` on key "k" to its bound at one instant; returns the units left.
std::uint64_t GrowLease(LeaseHarness& h, const Policy& p) {
  // 1 + 4 + 16 + 64 + 100: after 85 units the lease in hand is the full bound.
  for (int i = 0; i < 86; ++i) EXPECT_TRUE(h.Take().allowed);
  EXPECT_EQ(h.limiter->Stats().lease_grants, 5u);
  return p.lease - 1;
}

TEST(Lease, NeverUsedAtOrAfterItsValidity) {
  // GCRA 10000/s: validity = window / 10 = 100 ms.
  const Policy p = Leased(Policy::Gcra("g", 10000, std::chrono::seconds(1), 10000), 100);
  LeaseHarness h({p});
  const std::uint64_t left = GrowLease(h, p);
  ASSERT_EQ(left, 99u);
  const long evals = h.store->evaluations.load();
  h.clock->Advance(100'000 - 1);  // the last instant of the lease
  EXPECT_EQ(h.Take().source, DecisionSource::kLease);
  EXPECT_EQ(h.store->evaluations.load(), evals);
  h.clock->Advance(1);  // the lease's expiry: the store decides, the rest goes back
  EXPECT_EQ(h.Take().source, DecisionSource::kStore);
  EXPECT_EQ(h.store->evaluations.load(), evals + 1);
  EXPECT_EQ(h.store->refunds.load(), 1);
  EXPECT_EQ(h.store->refunded_units.load(), 98);  // 99 left, one used at the last instant
  EXPECT_EQ(h.limiter->Stats().lease_returns, 1u);
}

TEST(Lease, AShorterValidityIsKept) {
  const Policy p = Leased(Policy::TokenBucket("b", 10000, 10000, std::chrono::seconds(1)), 100,
                          5'000);  // 5 ms
  LeaseHarness h({p});
  GrowLease(h, p);
  h.clock->Advance(4'999);
  EXPECT_EQ(h.Take().source, DecisionSource::kLease);
  h.clock->Advance(1);
  EXPECT_EQ(h.Take().source, DecisionSource::kStore);
}

TEST(Lease, NeverOutlivesItsFixedWindow) {
  // 1 s windows, validity 100 ms; the lease is taken 10 ms before the window ends.
  const Policy p = Leased(Policy::FixedWindow("fw", 10000, std::chrono::seconds(1)), 100);
  LeaseHarness h({p});
  h.clock->Set(kNoon + 990'000);
  GrowLease(h, p);
  const long evals = h.store->evaluations.load();
  h.clock->Advance(9'999);
  EXPECT_EQ(h.Take().source, DecisionSource::kLease);
  h.clock->Advance(1);  // the next window: the store decides; nothing to give back
  const Decision d = h.Take();
  EXPECT_EQ(d.source, DecisionSource::kStore);
  EXPECT_EQ(h.store->evaluations.load(), evals + 1);
  EXPECT_EQ(h.store->refunds.load(), 0);
  // A fresh window, where the new lease is all that is charged: 20 units, from the
  // rate the last one was used at (2 units in its 10 ms, for 100 ms of validity).
  EXPECT_EQ(d.remaining, 9999u);
  EXPECT_EQ(h.StoreRemaining(p), 9980u);
}

TEST(Lease, NeverOutlivesItsSlidingCounterWindow) {
  const Policy p = Leased(Policy::SlidingWindowCounter("swc", 10000, std::chrono::seconds(1)), 100);
  LeaseHarness h({p});
  h.clock->Set(kNoon + 995'000);
  GrowLease(h, p);
  h.clock->Advance(4'999);
  EXPECT_EQ(h.Take().source, DecisionSource::kLease);
  h.clock->Advance(1);
  EXPECT_EQ(h.Take().source, DecisionSource::kStore);
  EXPECT_EQ(h.store->refunds.load(), 0);
}

TEST(Lease, TimeGoingBackDoesNotUseTheLease) {
  const Policy p = Leased(Policy::Gcra("g", 10000, std::chrono::seconds(1), 10000), 100);
  LeaseHarness h({p});
  GrowLease(h, p);
  h.clock->Advance(-1);
  EXPECT_EQ(h.Take().source, DecisionSource::kStore);
}

TEST(Lease, UnusedUnitsGoBackWhenTheLimiterEnds) {
  const Policy p = Leased(Policy::FixedWindow("fw", 1000, std::chrono::minutes(1)), 100);
  LeaseHarness h({p});
  GrowLease(h, p);
  EXPECT_EQ(h.StoreRemaining(p), 1000u - 185u);  // 85 units leased before, 100 now
  h.limiter.reset();
  EXPECT_EQ(h.StoreRemaining(p), 1000u - 86u);
}

TEST(Lease, MultiCheckCallsAndCostsAtTheBoundGoToTheStore) {
  using std::chrono::minutes;
  LeaseHarness h({Leased(Policy::FixedWindow("a", 1000, minutes(1)), 100),
                  Leased(Policy::FixedWindow("b", 1000, minutes(1)), 100)});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(h.Take().source, DecisionSource::kStore);
  EXPECT_EQ(h.store->evaluations.load(), 20);
  EXPECT_EQ(h.limiter->Stats().lease_grants, 0u);

  LeaseHarness one({Leased(Policy::FixedWindow("a", 1000, minutes(1)), 10)});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(one.Take("k", 10).source, DecisionSource::kStore);
  EXPECT_EQ(one.store->evaluations.load(), 5);
}

TEST(Lease, ShadowPoliciesAreNotLeased) {
  Policy p = Leased(Policy::FixedWindow("a", 1000, std::chrono::minutes(1)), 100);
  p.shadow = true;
  LeaseHarness h({p});
  for (int i = 0; i < 20; ++i) h.Take();
  EXPECT_EQ(h.store->evaluations.load(), 20);
}

TEST(Lease, ResetDropsTheLease) {
  const Policy p = Leased(Policy::FixedWindow("fw", 1000, std::chrono::minutes(1)), 100);
  LeaseHarness h({p});
  GrowLease(h, p);
  ASSERT_TRUE(h.limiter->Reset("k").ok());
  EXPECT_EQ(h.Take().source, DecisionSource::kStore);
  EXPECT_EQ(h.store->refunds.load(), 0);
}

TEST(Lease, ADeniedLeaseFallsBackToTheCallersCost) {
  // Another process takes 97 of 100 after this one's first request: this one's next
  // lease (4 units, sized before it knew) is denied, its unit alone passes.
  const Policy p = Leased(Policy::FixedWindow("fw", 100, std::chrono::minutes(1)), 50);
  LeaseHarness h({p});
  EXPECT_TRUE(h.Take().allowed);
  Policy plain = p;
  plain.lease = 0;
  const std::string k = *StoreKey("sluice", "k", p.name);
  StoreCheck c{.policy = &plain, .key = k, .cost = 97};
  Decision d;
  ASSERT_TRUE(h.store->inner
                  .Run({.checks = std::span<const StoreCheck>(&c, 1), .now = h.clock->Now()},
                       std::span<Decision>(&d, 1))
                  .ok());
  ASSERT_TRUE(d.allowed);
  const long before = h.store->evaluations.load();
  const Decision second = h.Take();
  EXPECT_TRUE(second.allowed);
  EXPECT_EQ(second.source, DecisionSource::kStore);
  EXPECT_EQ(h.store->evaluations.load(), before + 2);  // the lease, then the unit
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += h.Take().allowed ? 1 : 0;
  EXPECT_EQ(allowed, 1);
  EXPECT_EQ(h.StoreRemaining(p), 0u);
}

// Threads of one process share its lease: one fixed window, exactly the limit.
TEST(Lease, ThreadsShareOneLeaseExactly) {
  const Policy p = Leased(Policy::FixedWindow("fw", 5000, std::chrono::minutes(1)), 200);
  LeaseHarness h({p});
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) allowed += h.Take().allowed ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 5000);
  EXPECT_EQ(h.StoreRemaining(p), 0u);
}

// Four "processes" (limiters on one store) on a token bucket, time moving: allowed
// never exceeds what the bucket permits plus the documented bound (one lease each).
TEST(Lease, ProcessesStayWithinTheBound) {
  const Policy p = Leased(Policy::TokenBucket("b", 1000, 1000, std::chrono::seconds(1)), 50);
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<Limiter>> limiters;
  for (int i = 0; i < 4; ++i) {
    LimiterOptions o;
    o.policies = {p};
    o.store = store;
    o.clock = clock;
    limiters.push_back(std::move(Limiter::Create(std::move(o))).value());
  }
  long allowed = 0;
  const int steps = 3000;  // 3 s in 1 ms steps, 4 requests per process per step
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < 4; ++r) {
      for (auto& l : limiters) allowed += (*l->Acquire("hot")).allowed ? 1 : 0;
    }
    clock->Advance(1'000);
  }
  const long permitted = 1000 + 1000L * steps / 1000;  // a full bucket plus the refill
  EXPECT_LE(allowed, permitted + 4 * 50);
  EXPECT_GT(allowed, permitted - 4 * 50 - 100) << "leases must not starve the key either";
}

TEST(Lease, DecideAsyncUsesTheLeaseToo) {
  const Policy p = Leased(Policy::FixedWindow("fw", 1000, std::chrono::minutes(1)), 100);
  auto store = std::make_shared<CountingStore>();
  decide::Options o;
  o.store = store;
  o.clock = std::make_shared<ManualClock>(kNoon);
  decide::Decider decider(o);
  int allowed = 0, leased = 0;
  for (int i = 0; i < 1200; ++i) {
    decide::Check c{&p, nullptr, "sluice:{k}:fw", 1};
    decider.DecideAsync(std::span<const decide::Check>(&c, 1),
                        [&](const Status& s, std::span<const Decision> d, std::size_t b) {
                          ASSERT_TRUE(s.ok());
                          allowed += d[b].allowed ? 1 : 0;
                          leased += d[b].source == DecisionSource::kLease ? 1 : 0;
                        });
  }
  EXPECT_EQ(allowed, 1000);
  EXPECT_GT(leased, 900);
  EXPECT_LT(store->evaluations.load(), 50 + 2 * 200);
}

}  // namespace
}  // namespace sluice::testing
