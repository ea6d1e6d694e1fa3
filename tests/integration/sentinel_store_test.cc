// RedisStore on a redis-sentinel:// URL, with a scripted sentinel in front of real
// redis-servers so that each switch happens exactly when the test says: the store
// verifies the ROLE of what the sentinel reports, follows +switch-master, and re-asks
// on READONLY (a primary demoted under its connections). Bad input at Create is a clear
// error within connect_timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fake_sentinel.h"
#include "redis_server.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr Micros kCallTimeout = 100'000;
constexpr auto kMargin = milliseconds(1000);  // scheduling slack on a loaded machine

std::string SentinelUrl(const FakeSentinel& f, const std::string& query = "") {
  return "redis-sentinel://127.0.0.1:" + std::to_string(f.port()) + "/sluice-primary" + query;
}

Result<std::shared_ptr<RedisStore>> Open(const std::string& url) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = kCallTimeout;
  o.connect_timeout = 500'000;
  o.on_warning = [](std::string_view) {};
  return RedisStore::Create(std::move(o));
}

std::unique_ptr<Limiter> MakeLimiter(std::shared_ptr<Store> store) {
  LimiterOptions o;
  Policy p = Policy::FixedWindow("api", 1'000'000, std::chrono::hours(24));
  p.failure_mode = FailureMode::kFailClosed;
  o.policies = {p};
  o.store = std::move(store);
  o.deny_cache = false;
  auto l = Limiter::Create(std::move(o));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

bool Holds(RedisServer& server, const std::string& key) {
  auto k = StoreKey("sluice", key, "api");
  auto r = server.Command({"EXISTS", *k});
  return r.ok() && r->integer == 1;
}

// Decides on fresh keys until one lands on `server` (bounded); every call within its
// deadline and never an error.
bool LandsOn(Limiter& l, RedisServer& server, milliseconds bound, int* late) {
  const auto end = steady_clock::now() + bound;
  for (int i = 0; steady_clock::now() < end; ++i) {
    const std::string key = "probe-" + std::to_string(server.port()) + "-" + std::to_string(i);
    const auto start = steady_clock::now();
    auto d = l.Acquire(key);
    if (steady_clock::now() - start > std::chrono::microseconds(kCallTimeout) + kMargin) ++*late;
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (d.ok() && d->source == DecisionSource::kStore && Holds(server, key)) return true;
    std::this_thread::sleep_for(milliseconds(10));  // polling a real process, not timing
  }
  return false;
}

TEST(SentinelStore, DecidesOnTheReportedPrimaryAndFollowsSwitchMaster) {
  auto a = RedisServer::Start();
  auto b = RedisServer::Start();
  ASSERT_TRUE(a.ok() && b.ok());
  auto fake = FakeSentinel::Start("sluice-primary", (*a)->port());
  ASSERT_TRUE(fake.ok()) << fake.status().ToString();
  auto store = Open(SentinelUrl(**fake));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto limiter = MakeLimiter(*store);
  int late = 0;
  ASSERT_TRUE(LandsOn(*limiter, **a, milliseconds(5000), &late));

  // Both servers are masters: only the announcement can move the store.
  const auto subscribed_by = steady_clock::now() + std::chrono::seconds(10);
  while ((*fake)->subscribers() == 0 && steady_clock::now() < subscribed_by) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ((*fake)->subscribers(), 1) << "the store subscribes to +switch-master";
  (*fake)->SwitchTo((*b)->port());
  EXPECT_TRUE(LandsOn(*limiter, **b, milliseconds(5000), &late));
  EXPECT_EQ(late, 0);
}

TEST(SentinelStore, AReadonlyPrimaryMakesTheStoreAskAgain) {
  auto a = RedisServer::Start();
  auto b = RedisServer::Start();
  ASSERT_TRUE(a.ok() && b.ok());
  auto fake = FakeSentinel::Start("sluice-primary", (*a)->port());
  ASSERT_TRUE(fake.ok());
  auto store = Open(SentinelUrl(**fake));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto limiter = MakeLimiter(*store);
  int late = 0;
  ASSERT_TRUE(LandsOn(*limiter, **a, milliseconds(5000), &late));

  // A is demoted under the store's connections (they stay open) without an
  // announcement; the sentinel now reports B. Writes to A answer READONLY.
  (*fake)->SetPrimary((*b)->port());
  auto r = (*a)->Command({"REPLICAOF", "127.0.0.1", std::to_string((*b)->port())});
  ASSERT_TRUE(r.ok() && !r->is_error());
  EXPECT_TRUE(LandsOn(*limiter, **b, milliseconds(5000), &late));
  EXPECT_EQ(late, 0);
}

TEST(SentinelStore, ANodeThatIsNotMasterIsRefusedAtCreate) {
  auto a = RedisServer::Start();
  ASSERT_TRUE(a.ok());
  auto b = RedisServer::Start({.args = {"--replicaof", "127.0.0.1", std::to_string((*a)->port())}});
  ASSERT_TRUE(b.ok());
  auto fake = FakeSentinel::Start("sluice-primary", (*b)->port());  // reports the replica
  ASSERT_TRUE(fake.ok());
  const auto start = steady_clock::now();
  auto store = Open(SentinelUrl(**fake));
  EXPECT_LT(steady_clock::now() - start, milliseconds(500) + kMargin);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find("not a master"), std::string::npos)
      << store.status().ToString();
}

TEST(SentinelStore, BadSentinelInputIsAClearErrorWithinConnectTimeout) {
  auto a = RedisServer::Start();
  ASSERT_TRUE(a.ok());
  auto fake = FakeSentinel::Start("sluice-primary", (*a)->port(), "s-secret");
  ASSERT_TRUE(fake.ok());
  struct Case {
    std::string url;
    ErrorCode code;
    std::string says;
  };
  const std::string at = "127.0.0.1:" + std::to_string((*fake)->port());
  const std::vector<Case> cases = {
      {"redis-sentinel://" + at + "/other?sentinel_password=s-secret", ErrorCode::kInvalidArgument,
       "does not know a master named 'other'"},
      {"redis-sentinel://" + at + "/sluice-primary?sentinel_password=wrong",
       ErrorCode::kInvalidArgument, "sentinel_password"},
      {"redis-sentinel://" + at + "/sluice-primary", ErrorCode::kInvalidArgument,
       "sentinel_password"},
      {"redis-sentinel://127.0.0.1:1/sluice-primary", ErrorCode::kUnavailable,
       "no sentinel gave the address"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    const auto start = steady_clock::now();
    auto store = Open(c.url);
    EXPECT_LT(steady_clock::now() - start, milliseconds(500) + kMargin);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), c.code) << store.status().ToString();
    EXPECT_NE(store.status().message().find(c.says), std::string::npos)
        << store.status().ToString();
  }
  // The right password works.
  auto ok = Open("redis-sentinel://" + at + "/sluice-primary?sentinel_password=s-secret");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

}  // namespace
}  // namespace sluice::testing
