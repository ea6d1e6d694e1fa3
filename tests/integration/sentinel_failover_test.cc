// Behaviour that changes a real Sentinel group, one group per test: the watcher hears
// a failover; the store refuses a reported primary whose ROLE is not master; and a
// primary demoted under the store's open connections (REPLICAOF: its writes answer
// READONLY) makes the store ask again and move once the sentinels have failed over,
// every call meanwhile within its deadline and decided by the failure mode.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "redis/sentinel.h"
#include "redis_sentinel.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_limiter.h"

namespace sluice::testing {
namespace {

using redis::HostPort;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr Micros kCallTimeout = 100'000;
constexpr auto kMargin = milliseconds(1000);  // scheduling slack on a loaded machine
// Generous: on a loaded machine connecting and loading the scripts can take a while. A
// refusal must still come at once (checked against kMargin, not against this).
constexpr Micros kConnectTimeout = 5'000'000;

Result<std::shared_ptr<RedisStore>> Open(const std::string& url) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = kCallTimeout;
  o.connect_timeout = kConnectTimeout;
  o.on_warning = [](std::string_view) {};
  return RedisStore::Create(std::move(o));
}

TEST(SentinelFailover, TheWatcherHearsAFailover) {
  auto group = RedisSentinelGroup::Start();
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  redis::SentinelOptions o;
  for (int port : g.sentinel_ports()) o.sentinels.push_back({"127.0.0.1", port});
  o.master_name = g.master_name();

  std::mutex mu;
  std::condition_variable cv;
  int resubscribed = 0;
  std::vector<HostPort> heard;
  redis::SwitchWatcher watcher(o, [&](const std::optional<HostPort>& a) {
    std::lock_guard<std::mutex> lock(mu);
    if (a) {
      heard.push_back(*a);
    } else {
      ++resubscribed;
    }
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return resubscribed > 0; }));
  }
  const int old_port = g.primary().port();
  ASSERT_TRUE(g.Failover().ok());
  const int new_port = g.primary().port();
  ASSERT_NE(new_port, old_port);
  std::unique_lock<std::mutex> lock(mu);
  // The promotion, then the switch: both name the new primary.
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return heard.size() >= 2; }));
  for (const HostPort& a : heard) EXPECT_EQ(a.Describe(), "127.0.0.1:" + std::to_string(new_port));
}

TEST(SentinelFailover, AReportedPrimaryThatIsNotMasterIsRefused) {
  auto group = RedisSentinelGroup::Start();
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  // Demote the primary behind the sentinels' back: until they notice (seconds), they
  // still report it.
  auto r = g.primary().Command({"REPLICAOF", "127.0.0.1", std::to_string(g.replica().port())});
  ASSERT_TRUE(r.ok() && !r->is_error());
  const auto start = steady_clock::now();
  auto store = Open(g.Url());
  EXPECT_LT(steady_clock::now() - start, milliseconds(500) + kMargin);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find("is not a master (ROLE answered slave)"),
            std::string::npos)
      << store.status().ToString();
}

TEST(SentinelFailover, ADemotedPrimaryAnsweringReadonlyIsLeft) {
  auto group = RedisSentinelGroup::Start();
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  auto store = Open(g.Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto limiter = StoreOnlyLimiter(*store, "api", 1'000'000);
  ASSERT_TRUE(limiter.ok());
  ASSERT_EQ((*limiter)->Acquire("before")->source, DecisionSource::kStore);

  // The primary becomes a replica of the replica; the store's connections stay open
  // and its writes now answer READONLY. Sentinel treats a master that says it is a
  // replica as down and fails over to the other node.
  RedisServer& next = g.replica();
  auto r = g.primary().Command({"REPLICAOF", "127.0.0.1", std::to_string(next.port())});
  ASSERT_TRUE(r.ok() && !r->is_error());
  int late = 0, errors = 0, failure_mode = 0;
  bool moved = false;
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; !moved && steady_clock::now() < end; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto start = steady_clock::now();
    auto d = (*limiter)->Acquire(key);
    if (steady_clock::now() - start > std::chrono::microseconds(kCallTimeout) + kMargin) ++late;
    if (!d.ok()) {
      ++errors;
    } else if (d->source != DecisionSource::kStore) {
      ++failure_mode;
    } else {
      auto k = StoreKey("sluice", key, "api");
      auto on_next = next.Command({"EXISTS", *k});
      moved = on_next.ok() && on_next->integer == 1;
    }
    if (!moved) std::this_thread::sleep_for(milliseconds(10));  // polling, not timing
  }
  EXPECT_TRUE(moved) << "the store never moved to the new primary";
  EXPECT_GT(failure_mode, 0) << "READONLY calls are decided by the failure mode";
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(late, 0);
}

}  // namespace
}  // namespace sluice::testing
