// The decision layer on its own: any policies per batch, a deny cache whose size is a
// byte budget, each check's own failure mode, the asynchronous entry.
#include "decide/decider.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "sluice/memory_store.h"
#include "sluice/permit.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

// A remote-looking store that answers later: Evaluate runs at once on an inner
// MemoryStore, the callback waits in a queue until the test runs it.
class DeferredStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    ++calls;
    if (!batch.checks.empty()) last_cost = batch.checks[0].cost;
    if (down) return Status::Unavailable("down (test)");
    return inner.Run(batch, out);
  }
  void RunAsync(const StoreBatch& batch, RunCallback done) override {
    std::vector<Decision> out(batch.op == StoreOp::kRefund ? 0 : batch.checks.size());
    Status s = Run(batch, out);
    queue.push_back([s, out, done = std::move(done)] { done(s, out); });
  }
  Status Reset(const Policy& p, std::string_view k) override { return inner.Reset(p, k); }
  bool IsRemote() const override { return true; }
  // Runs queued callbacks (and the ones they queue) until none is left.
  void Drain() {
    while (!queue.empty()) {
      auto f = std::move(queue.front());
      queue.pop_front();
      f();
    }
  }
  MemoryStore inner;
  std::deque<std::function<void()>> queue;
  int calls = 0;
  std::uint64_t last_cost = 0;  // of the first check of the last batch
  bool down = false;
};

decide::Decider MakeDecider(std::shared_ptr<Store> store, std::shared_ptr<const Clock> clock,
                            std::size_t deny_bytes = 1 << 16) {
  decide::Options o;
  o.store = std::move(store);
  o.clock = std::move(clock);
  o.deny_cache_bytes = deny_bytes;
  return decide::Decider(std::move(o));
}

TEST(Decider, AsyncAnswersLikeSyncWithShadowChecksInTheirOwnBatch) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto sync_store = std::make_shared<MemoryStore>();
  auto async_store = std::make_shared<DeferredStore>();
  decide::Decider sync = MakeDecider(sync_store, clock);
  decide::Decider async = MakeDecider(async_store, clock);
  Policy enforced = Policy::FixedWindow("enforced", 3, std::chrono::minutes(1));
  Policy shadow = Policy::FixedWindow("shadow", 1, std::chrono::minutes(1));
  shadow.shadow = true;
  for (int i = 0; i < 6; ++i) {
    std::string k1 = "p:{a}:enforced", k2 = "p:{a}:shadow";
    decide::Check checks[] = {{&enforced, nullptr, k1, 1}, {&shadow, nullptr, k2, 1}};
    Decision want[2];
    auto bind = sync.Decide(checks, want);
    ASSERT_TRUE(bind.ok());
    bool called = false;
    async.DecideAsync(checks, [&](const Status& s, std::span<const Decision> d, std::size_t b) {
      called = true;
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(d.size(), 2u);
      EXPECT_EQ(b, *bind);
      for (int j = 0; j < 2; ++j) {
        EXPECT_EQ(d[j].allowed, want[j].allowed) << i << "/" << j;
        EXPECT_EQ(d[j].remaining, want[j].remaining) << i << "/" << j;
        EXPECT_EQ(d[j].shadow_denied, want[j].shadow_denied) << i << "/" << j;
      }
    });
    // The caller's keys are gone before the store answers.
    k1.assign(k1.size(), 'x');
    k2.assign(k2.size(), 'x');
    // Once both keys are known denials (from the 5th request), the deny cache answers
    // inline, without the store.
    EXPECT_EQ(called, i >= 4) << i;
    async_store->Drain();
    EXPECT_TRUE(called);
    // The shadow limit (1) never holds back the enforced one (3).
    EXPECT_EQ(want[0].allowed, i < 3) << i;
    EXPECT_TRUE(want[1].allowed);
    EXPECT_EQ(want[1].shadow_denied, i >= 1) << i;
  }
  EXPECT_EQ(sync.Stats().decisions, 6u);
  EXPECT_EQ(async.Stats().decisions, 6u);
  EXPECT_EQ(async.Stats().denied, 3u);
}

TEST(Decider, DenyCacheIsAByteBudgetWhateverTheKeysAndPolicies) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  decide::Decider d = MakeDecider(store, clock, 64 << 10);
  const std::size_t bytes = d.DenyCacheBytes();
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, std::size_t{64} << 10);
  // 5000 distinct policies, each with a denied key: the budget does not move.
  std::vector<Policy> ps;
  ps.reserve(5000);
  for (int i = 0; i < 5000; ++i) {
    ps.push_back(Policy::FixedWindow("p" + std::to_string(i), 1, std::chrono::minutes(1)));
  }
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "x:{k}:p" + std::to_string(i);
    decide::Check c{&ps[i], nullptr, key, 1};
    Decision out[1];
    ASSERT_TRUE(d.Decide({&c, 1}, out).ok());
    ASSERT_TRUE(d.Decide({&c, 1}, out).ok());
    EXPECT_FALSE(out[0].allowed);
  }
  EXPECT_EQ(d.DenyCacheBytes(), bytes);
  // The cache still answers a known denial without the store.
  const std::string key = "x:{k}:p4999";
  decide::Check c{&ps[4999], nullptr, key, 1};
  Decision out[1];
  const int calls = store->calls;
  ASSERT_TRUE(d.Decide({&c, 1}, out).ok());
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(out[0].source, DecisionSource::kDenyCache);
  EXPECT_EQ(store->calls, calls);
}

// A check with skip_deny_cache always asks the store, and its denial is not cached: units
// given back to the store (a refund the cache did not hear of) are seen at once. A plain
// check of the same key still gets the cached denial of a plain one.
TEST(Decider, SkipDenyCacheAsksTheStoreAndCachesNothing) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  decide::Decider d = MakeDecider(store, clock);
  const Policy p = Policy::FixedWindow("p", 3, std::chrono::hours(24));
  const std::string key = "x:{k}:p";
  decide::Check skip{&p, nullptr, key, 3};
  skip.skip_deny_cache = true;
  Decision out[1];
  ASSERT_TRUE(d.Decide({&skip, 1}, out).ok());
  ASSERT_TRUE(out[0].allowed);
  skip.cost = 1;
  ASSERT_TRUE(d.Decide({&skip, 1}, out).ok());  // the store denies: nothing cached
  EXPECT_FALSE(out[0].allowed);
  const StoreCheck back{.policy = &p, .key = key, .cost = 2};
  ASSERT_TRUE(
      store->inner.Run(StoreBatch{.op = StoreOp::kRefund, .checks = {&back, 1}, .now = kNoon}, {})
          .ok());
  ASSERT_TRUE(d.Decide({&skip, 1}, out).ok());
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].source, DecisionSource::kStore);
  // A plain check's denial is cached as before.
  decide::Check plain{&p, nullptr, key, 2};
  ASSERT_TRUE(d.Decide({&plain, 1}, out).ok());
  EXPECT_FALSE(out[0].allowed);
  ASSERT_TRUE(d.Decide({&plain, 1}, out).ok());
  EXPECT_EQ(out[0].source, DecisionSource::kDenyCache);
  // ... but a skip_deny_cache check of the same key is not denied from it.
  skip.cost = 1;
  ASSERT_TRUE(d.Decide({&skip, 1}, out).ok());
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].source, DecisionSource::kStore);
}

TEST(Decider, StoreFailureFollowsEachChecksOwnMode) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  store->down = true;
  decide::Decider d = MakeDecider(store, clock);
  Policy closed = Policy::FixedWindow("closed", 5, std::chrono::minutes(1));
  closed.failure_mode = FailureMode::kFailClosed;
  Policy open = Policy::FixedWindow("open", 5, std::chrono::minutes(1));
  Policy local = Policy::FixedWindow("local", 4, std::chrono::minutes(1));
  local.failure_mode = FailureMode::kLocalFallback;
  local.fallback_divisor = 2;
  const Policy local_fb = decide::FallbackPolicy(local);
  EXPECT_EQ(local_fb.limit, 2u);
  decide::Check checks[] = {{&closed, nullptr, "a:closed", 1}, {&open, nullptr, "a:open", 1}};
  Decision out[2];
  auto bind = d.Decide(checks, out);
  ASSERT_TRUE(bind.ok());
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(out[0].source, DecisionSource::kFailClosed);
  EXPECT_TRUE(out[1].allowed);
  EXPECT_EQ(out[1].source, DecisionSource::kFailOpen);
  EXPECT_EQ(*bind, 0u);
  // A fail-closed denial leaves the local fallback's budget untouched (peeked only).
  decide::Check with_local[] = {{&closed, nullptr, "b:closed", 1},
                                {&local, &local_fb, "b:local", 1}};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d.Decide(with_local, out).ok());
  EXPECT_EQ(out[1].source, DecisionSource::kLocalFallback);
  EXPECT_EQ(out[1].remaining, 2u);
  decide::Check only_local[] = {{&local, &local_fb, "b:local", 1}};
  int ok = 0;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(d.Decide(only_local, out).ok());
    ok += out[0].allowed;
  }
  EXPECT_EQ(ok, 2);
}

// What DecideAsync answered for a permit operation on one check.
struct PermitOutcome {
  bool called = false;
  Status status;
  bool held = false;  // the status is OK and the decision allowed (the permit was held)
};

PermitOutcome RunPermitOp(decide::Decider& d, DeferredStore& store, const decide::Check& c,
                          StoreOp op) {
  PermitOutcome o;
  d.DecideAsync(
      {&c, 1},
      [&](const Status& s, std::span<const Decision> out, std::size_t) {
        o.called = true;
        o.status = s;
        o.held = s.ok() && !out.empty() && out[0].allowed;
      },
      op);
  store.Drain();
  EXPECT_TRUE(o.called);
  return o;
}

// Issue #20 item 2: failure modes decide admissions only. A store error during a
// release or an extend is that error, never a claimed success (fail-open) or a false
// "not held" (fail-closed); the permit is still there once the store is back.
TEST(Decider, PermitOperationsReturnTheStoreErrorWhateverTheFailureMode) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  decide::Decider d = MakeDecider(store, clock);
  Policy open = Policy::Concurrency("open", 2, std::chrono::seconds(30));
  Policy closed = Policy::Concurrency("closed", 2, std::chrono::seconds(30));
  closed.failure_mode = FailureMode::kFailClosed;
  Policy local = Policy::Concurrency("local", 2, std::chrono::seconds(30));
  local.failure_mode = FailureMode::kLocalFallback;
  const Policy local_fb = decide::FallbackPolicy(local);
  const std::string id(kPermitIdLength, 'a');
  auto run = [&](const decide::Check& c, StoreOp op) { return RunPermitOp(d, *store, c, op); };
  for (const Policy* p : {&open, &closed, &local}) {
    const std::string key = "k:" + p->name;
    const decide::Check c{p, p == &local ? &local_fb : nullptr, key, 1, id};
    ASSERT_TRUE(run(c, StoreOp::kDecide).held) << p->name;
    store->down = true;
    for (StoreOp op : {StoreOp::kExtend, StoreOp::kRelease}) {
      const PermitOutcome o = run(c, op);
      EXPECT_EQ(o.status.code(), ErrorCode::kUnavailable)
          << p->name << " op " << static_cast<int>(op) << ": " << o.status.ToString()
          << " held=" << o.held;
    }
    store->down = false;
    EXPECT_TRUE(run(c, StoreOp::kExtend).held) << p->name;
    EXPECT_TRUE(run(c, StoreOp::kRelease).held) << p->name;
    EXPECT_FALSE(run(c, StoreOp::kRelease).held) << p->name;
  }
}

// A permit the local fallback took while the store was down is released there while
// the store is still down.
TEST(Decider, PermitOfTheLocalFallbackIsReleasedThereWhileTheStoreIsDown) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  store->down = true;
  decide::Decider d = MakeDecider(store, clock);
  Policy local = Policy::Concurrency("local", 2, std::chrono::seconds(30));
  local.failure_mode = FailureMode::kLocalFallback;
  const Policy local_fb = decide::FallbackPolicy(local);
  const std::string id(kPermitIdLength, 'b');
  const decide::Check c{&local, &local_fb, "k:local", 1, id};
  EXPECT_TRUE(RunPermitOp(d, *store, c, StoreOp::kDecide).held);
  const PermitOutcome extended = RunPermitOp(d, *store, c, StoreOp::kExtend);
  EXPECT_TRUE(extended.held) << extended.status.ToString();
  const PermitOutcome released = RunPermitOp(d, *store, c, StoreOp::kRelease);
  EXPECT_TRUE(released.held) << released.status.ToString();
  // Held nowhere now, and the store cannot say: the store's error.
  const PermitOutcome again = RunPermitOp(d, *store, c, StoreOp::kRelease);
  EXPECT_EQ(again.status.code(), ErrorCode::kUnavailable) << again.status.ToString();
}

TEST(Decider, CostAboveCapacityDeniesThatCheckAndChargesNothing) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<MemoryStore>();
  decide::Decider d = MakeDecider(store, clock);
  Policy small = Policy::FixedWindow("small", 2, std::chrono::minutes(1));
  Policy big = Policy::FixedWindow("big", 100, std::chrono::minutes(1));
  decide::Check checks[] = {{&small, nullptr, "k:small", 5}, {&big, nullptr, "k:big", 5}};
  Decision out[2];
  auto bind = d.Decide(checks, out);
  ASSERT_TRUE(bind.ok());
  EXPECT_EQ(*bind, 0u);
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(out[0].remaining, 0u);
  EXPECT_TRUE(out[1].allowed);
  EXPECT_EQ(out[1].remaining, 100u);  // peeked: nothing charged
}

// Usage charged after the fact (Policy::overage): a report of more than the capacity,
// or for a key already denied, must reach the store whole. Before the fix the first was
// sent as a peek (cost 0) and the second answered from the deny cache: both charged
// nothing.
TEST(Decider, ChargedReportsReachTheStoreWholeEvenForDeniedKeys) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<DeferredStore>();
  decide::Decider d = MakeDecider(store, clock);
  Policy tokens = Policy::FixedWindow("tokens", 1000, std::chrono::minutes(1));
  tokens.overage = Overage::kCharge;
  const std::string key = "k:{a}:tokens";
  for (int i = 0; i < 3; ++i) {
    decide::Check c{&tokens, nullptr, key, 5000};
    bool called = false;
    d.DecideAsync({&c, 1}, [&](const Status& s, std::span<const Decision> out, std::size_t) {
      called = true;
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_FALSE(out[0].allowed);
    });
    store->Drain();
    EXPECT_TRUE(called);
    EXPECT_EQ(store->calls, i + 1) << "report " << i << " did not reach the store";
    EXPECT_EQ(store->last_cost, 5000u) << "report " << i;
  }
  // Within the capacity: 500 fit, then 600 are denied twice; the second denial is a
  // known one, and a reject policy would take it from the deny cache.
  const std::string other = "k:{b}:tokens";
  int calls = store->calls;
  for (std::uint64_t cost : {500, 600, 600}) {
    decide::Check c{&tokens, nullptr, other, cost};
    d.DecideAsync({&c, 1}, [&](const Status& s, std::span<const Decision> out, std::size_t) {
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(out[0].allowed, cost == 500);
    });
    store->Drain();
    EXPECT_EQ(store->calls, ++calls) << "a report of " << cost << " did not reach the store";
  }
}

TEST(Decider, BatchesAreBounded) {
  auto d = MakeDecider(std::make_shared<MemoryStore>(), std::make_shared<ManualClock>(kNoon));
  Policy p = Policy::FixedWindow("p", 2, std::chrono::minutes(1));
  std::vector<std::string> keys;
  std::vector<decide::Check> checks;
  for (std::size_t i = 0; i <= kMaxBatchChecks; ++i) keys.push_back("k" + std::to_string(i));
  for (const std::string& k : keys) checks.push_back({&p, nullptr, k, 1});
  std::vector<Decision> out(checks.size());
  auto r = d.Decide(checks, out);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(d.Decide(std::span(checks).first(kMaxBatchChecks), out).ok());
}

}  // namespace
}  // namespace sluice::testing
