// The store wrappers of sluiced (TimedStore) and the `sluice` tool (RecordingStore,
// CountingStore) pass every Store call through, Refund included: a refund through one
// of them used to answer "this store does not support Refund" (Store's default), and
// Store::InProcess, so that the decision layer takes its in-process fast path through
// them (issue #17 bug 1: sluiced wraps every store in TimedStore, which hid the
// MemoryStore from the decider's dynamic_cast).
#include "cli/store_wrappers.h"

#include <gtest/gtest.h>

#include <memory>

#include "limiter/decider.h"
#include "service/timed_store.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

constexpr Micros kSec = 1'000'000;

template <typename Wrap>
void RefundGoesThrough(Wrap wrap) {
  auto clock = std::make_shared<ManualClock>(1000 * kSec);
  auto inner = std::make_shared<MemoryStore>();
  std::shared_ptr<Store> wrapped = wrap(inner);
  Policy p;
  p.name = "p";
  p.limit = 2;
  p.window = 60 * kSec;
  LimiterOptions o;
  o.policies = {p};
  o.store = wrapped;
  o.clock = clock;
  auto limiter = Limiter::Create(std::move(o));
  ASSERT_TRUE(limiter.ok()) << limiter.status().message();
  Limiter& l = **limiter;
  ASSERT_TRUE(l.Acquire("k")->allowed);
  ASSERT_TRUE(l.Acquire("k")->allowed);
  ASSERT_FALSE(l.Acquire("k")->allowed);
  // Synchronous refund.
  Status s = l.Refund("k", 1);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(l.Acquire("k")->allowed);
  EXPECT_FALSE(l.Acquire("k")->allowed);
  // Asynchronous refund, straight on the wrapper: reaches the store too.
  Status async = Status::Internal("not called");
  Policy q = p;
  const std::string key = "raw";
  StoreCheck c{.policy = &q, .key = key, .cost = 1};
  Decision d[1];
  ASSERT_TRUE(
      wrapped->Run({.checks = std::span<const StoreCheck>(&c, 1), .now = clock->Now()}, d).ok());
  ASSERT_EQ(d[0].remaining, 1u);
  wrapped->RunAsync(
      {.op = StoreOp::kRefund, .checks = std::span<const StoreCheck>(&c, 1), .now = clock->Now()},
      [&](const Status& st, std::span<const Decision>) { async = st; });
  EXPECT_TRUE(async.ok()) << async.message();
  c.cost = 0;  // peek
  ASSERT_TRUE(
      wrapped->Run({.checks = std::span<const StoreCheck>(&c, 1), .now = clock->Now()}, d).ok());
  EXPECT_EQ(d[0].remaining, 2u);
}

TEST(StoreWrappers, TimedStorePassesRefundThrough) {
  auto metrics = std::make_shared<service::Metrics>();
  RefundGoesThrough([&](std::shared_ptr<Store> s) {
    return std::make_shared<service::TimedStore>(std::move(s), metrics);
  });
}

TEST(StoreWrappers, RecordingStorePassesRefundThrough) {
  RefundGoesThrough(
      [](std::shared_ptr<Store> s) { return std::make_shared<cli::RecordingStore>(std::move(s)); });
}

TEST(StoreWrappers, CountingStorePassesRefundThrough) {
  RefundGoesThrough(
      [](std::shared_ptr<Store> s) { return std::make_shared<cli::CountingStore>(std::move(s)); });
}

// A decision through the wrapper takes the in-process fast path, and the wrapper still
// sees the store call.
template <typename Wrap>
void FastPathGoesThrough(Wrap wrap) {
  auto inner = std::make_shared<MemoryStore>();
  std::shared_ptr<Store> wrapped = wrap(inner);
  ASSERT_EQ(wrapped->InProcess(), inner.get());
  decide::Options o;
  o.store = wrapped;
  o.clock = std::make_shared<ManualClock>(1000 * kSec);
  decide::Decider d(std::move(o));
  const Policy p = Policy::FixedWindow("p", 2, std::chrono::minutes(1));
  const decide::Check c{&p, nullptr, "k", 1};
  Decision out[1];
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d.Decide({&c, 1}, out).ok());
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(d.InProcessDecisions(), 3u);
  EXPECT_EQ(d.Stats().decisions, 3u);
}

TEST(StoreWrappers, TimedStoreKeepsTheInProcessFastPath) {
  auto metrics = std::make_shared<service::Metrics>();
  FastPathGoesThrough([&](std::shared_ptr<Store> s) {
    return std::make_shared<service::TimedStore>(std::move(s), metrics);
  });
  // Timed all the same.
  std::string m;
  metrics->Render(m);
  EXPECT_NE(m.find("sluiced_store_latency_seconds_count 3"), std::string::npos) << m;
}

TEST(StoreWrappers, ToolWrappersKeepTheInProcessFastPath) {
  FastPathGoesThrough(
      [](std::shared_ptr<Store> s) { return std::make_shared<cli::RecordingStore>(std::move(s)); });
  FastPathGoesThrough(
      [](std::shared_ptr<Store> s) { return std::make_shared<cli::CountingStore>(std::move(s)); });
}

}  // namespace
}  // namespace sluice
