// Degraded start on a cluster (require_connection = false): Create returns at once
// although no seed answers, the failure mode decides every call meanwhile, and once the
// cluster is up on the seeds' addresses the store reads the map in the background and
// decides from the store again, with no call from the test to make it happen.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "redis_cluster.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
constexpr auto kMargin = milliseconds(1500);  // scheduling slack on a loaded machine

TEST(ClusterDegradedStart, StartsWithoutSeedsDecidesByFailureModeAndRecovers) {
  std::vector<int> ports;
  std::string url = "redis-cluster://";
  for (int i = 0; i < 3; ++i) {
    auto p = FreeLoopbackPort();
    ASSERT_TRUE(p.ok());
    ports.push_back(*p);
    url += (i > 0 ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(*p);
  }
  // Without degraded start the same URL is an error.
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout = 500'000;
  o.call_timeout = 200'000;
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  auto strict = RedisStore::Create(o);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), ErrorCode::kUnavailable) << strict.status().ToString();

  o.require_connection = false;
  // Each call's deadline once the cluster is up: generous, as the decisions after the
  // recovery must come from the store even on a loaded machine under a sanitizer (one
  // of 30 missed a 200 ms deadline there).
  o.call_timeout = 5'000'000;
  const auto start = steady_clock::now();
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_LT(steady_clock::now() - start, milliseconds(500) + kMargin);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.back().find("could not read maxmemory-policy"), std::string::npos)
      << warnings.back();

  LimiterOptions lo;
  Policy closed = Policy::FixedWindow("closed", 10, std::chrono::hours(1));
  closed.failure_mode = FailureMode::kFailClosed;
  Policy open = Policy::FixedWindow("open", 10, std::chrono::hours(1));
  open.failure_mode = FailureMode::kFailOpen;
  lo.policies = {closed, open};
  lo.store = *store;
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  const Check fail_closed{0, "k", 1}, fail_open{1, "k", 1};
  auto c = (*limiter)->Acquire(std::span<const Check>(&fail_closed, 1));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->allowed);
  EXPECT_EQ(c->source, DecisionSource::kFailClosed);
  auto f = (*limiter)->Acquire(std::span<const Check>(&fail_open, 1));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->allowed);
  EXPECT_EQ(f->source, DecisionSource::kFailOpen);

  // The cluster comes up on the seeds' ports; the store finds it by itself.
  RedisClusterOptions co;
  co.replicas_per_primary = 0;
  co.ports = ports;
  auto cluster = RedisCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  bool recovered = false;
  const auto end = steady_clock::now() + std::chrono::seconds(30);
  while (!recovered && steady_clock::now() < end) {
    auto d = (*limiter)->Acquire(std::span<const Check>(&fail_closed, 1));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    recovered = d->source == DecisionSource::kStore;
    if (!recovered) std::this_thread::sleep_for(milliseconds(20));  // polling an event
  }
  ASSERT_TRUE(recovered) << "no decision from the store within 30 s of the cluster's start";
  // Decisions now come from the cluster, on every algorithm's key as usual.
  for (int i = 0; i < 30; ++i) {
    const std::string key = "after" + std::to_string(i);  // Check holds a view of it
    const Check k{0, key, 1};
    auto d = (*limiter)->Acquire(std::span<const Check>(&k, 1));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source, DecisionSource::kStore) << key << ": " << DecisionSourceName(d->source);
    EXPECT_TRUE(d->allowed);
  }
}

}  // namespace
}  // namespace sluice::testing
