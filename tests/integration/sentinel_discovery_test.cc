// Primary discovery against a real Sentinel group: asking the sentinels, the errors of
// bad input (a name they do not know, wrong credentials, none reachable, one that
// never answers), and following +switch-master through a failover.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "fake_sentinel.h"
#include "redis/sentinel.h"
#include "redis_sentinel.h"

namespace sluice::testing {
namespace {

using redis::HostPort;
using redis::SentinelOptions;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Scheduling slack on a loaded 2-core machine: the bounds are about hangs, not speed.
constexpr auto kMargin = milliseconds(1000);

// The address-giving tests use a scripted sentinel (fast, and the answers are the
// test's); following a real failover uses a real group.
constexpr int kPrimaryPort = 16379;  // what the fake answers; nothing connects to it

std::unique_ptr<FakeSentinel> Fake(const std::string& password = "sentinel-secret") {
  auto f = FakeSentinel::Start("sluice-primary", kPrimaryPort, password);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(*f) : nullptr;
}

SentinelOptions OptionsFor(const FakeSentinel& f) {
  SentinelOptions o;
  o.sentinels = {{"127.0.0.1", f.port()}};
  o.master_name = "sluice-primary";
  o.password = "sentinel-secret";
  o.connect_timeout = 500'000;
  return o;
}

// A port where nothing listens (bound, then closed).
int RefusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(SentinelDiscovery, ParsesSwitchMasterMessages) {
  auto sw = redis::ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 6380");
  ASSERT_TRUE(sw.has_value());
  EXPECT_EQ(sw->first, "mymaster");
  EXPECT_EQ(sw->second, (HostPort{"127.0.0.1", 6380}));
  EXPECT_FALSE(redis::ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1").has_value());
  EXPECT_FALSE(redis::ParseSwitchMaster("m 1.1.1.1 1 1.1.1.1 70000").has_value());
  EXPECT_FALSE(redis::ParseSwitchMaster("m 1.1.1.1 1 1.1.1.1 12x").has_value());
}

TEST(SentinelDiscovery, AnySentinelGivesThePrimary) {
  auto f = Fake();
  ASSERT_NE(f, nullptr);
  SentinelOptions o = OptionsFor(*f);
  // The first two are unreachable: the third answers.
  o.sentinels.insert(o.sentinels.begin(), {{"127.0.0.1", RefusedPort()}, {"127.0.0.1", 1}});
  auto a = redis::AskSentinels(o, 1'500'000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->port, kPrimaryPort);
  EXPECT_EQ(a->host, "127.0.0.1");
}

TEST(SentinelDiscovery, AnUnknownNameIsAClearErrorAtOnce) {
  auto f = Fake();
  ASSERT_NE(f, nullptr);
  SentinelOptions o = OptionsFor(*f);
  o.master_name = "no-such-master";
  const auto start = steady_clock::now();
  auto a = redis::AskSentinels(o, 1'000'000);
  EXPECT_LT(steady_clock::now() - start, milliseconds(1000) + kMargin);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kInvalidArgument) << a.status().ToString();
  EXPECT_NE(a.status().message().find("does not know a master named 'no-such-master'"),
            std::string::npos)
      << a.status().ToString();
}

TEST(SentinelDiscovery, WrongSentinelCredentialsAreNamed) {
  auto f = Fake();
  ASSERT_NE(f, nullptr);
  SentinelOptions o = OptionsFor(*f);
  o.password = "wrong";
  auto a = redis::AskSentinels(o, 1'000'000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kInvalidArgument) << a.status().ToString();
  EXPECT_NE(a.status().message().find("sentinel_password"), std::string::npos)
      << a.status().ToString();
}

TEST(SentinelDiscovery, NoReachableSentinelIsUnavailableWithinTheBudget) {
  SentinelOptions o;
  o.master_name = "m";
  o.sentinels = {{"127.0.0.1", RefusedPort()}, {"127.0.0.1", RefusedPort()}};
  auto a = redis::AskSentinels(o, 1'000'000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kUnavailable) << a.status().ToString();
  EXPECT_NE(a.status().message().find("no sentinel gave the address of master 'm'"),
            std::string::npos)
      << a.status().ToString();

  // A sentinel that accepts but never answers (a listening socket nobody reads) gets
  // its share of the budget, not all of it: the next one still answers in time.
  auto f = Fake();
  ASSERT_NE(f, nullptr);
  const int hole = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(hole, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(hole, 8), 0);
  getsockname(hole, reinterpret_cast<sockaddr*>(&addr), &len);
  SentinelOptions mixed = OptionsFor(*f);
  mixed.sentinels.insert(mixed.sentinels.begin(), HostPort{"127.0.0.1", ntohs(addr.sin_port)});
  const auto start = steady_clock::now();
  auto b = redis::AskSentinels(mixed, 1'200'000);
  EXPECT_LT(steady_clock::now() - start, milliseconds(1200) + kMargin);
  EXPECT_TRUE(b.ok()) << b.status().ToString();

  // Only the silent one: Unavailable once the budget is spent, not later.
  mixed.sentinels.resize(1);
  const auto start2 = steady_clock::now();
  auto c = redis::AskSentinels(mixed, 400'000);
  EXPECT_LT(steady_clock::now() - start2, milliseconds(400) + kMargin);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnavailable) << c.status().ToString();
  close(hole);
}

// The watcher follows announcements, and moves to the next sentinel when its own goes
// away (telling its owner to re-ask: a switch may have been missed).
TEST(SentinelDiscovery, TheWatcherFollowsSwitchesAndSurvivesASentinel) {
  auto first = Fake("");
  auto second = Fake("");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  SentinelOptions o;
  o.sentinels = {{"127.0.0.1", first->port()}, {"127.0.0.1", second->port()}};
  o.master_name = "sluice-primary";
  std::mutex mu;
  std::condition_variable cv;
  int resubscribed = 0;
  std::vector<HostPort> switches;
  redis::SwitchWatcher watcher(o, [&](const std::optional<HostPort>& a) {
    std::lock_guard<std::mutex> lock(mu);
    if (a) {
      switches.push_back(*a);
    } else {
      ++resubscribed;
    }
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return resubscribed == 1; }));
  lock.unlock();
  ASSERT_EQ(first->subscribers(), 1);
  first->SwitchTo(16380);
  lock.lock();
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return switches.size() == 1; }));
  EXPECT_EQ(switches[0], (HostPort{"127.0.0.1", 16380}));
  lock.unlock();
  first.reset();  // the subscribed sentinel goes away
  lock.lock();
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return resubscribed == 2; }));
  lock.unlock();
  second->SwitchTo(16381);
  lock.lock();
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return switches.size() == 2; }));
  EXPECT_EQ(switches[1], (HostPort{"127.0.0.1", 16381}));
}

TEST(SentinelDiscovery, TheWatcherHearsAFailover) {
  RedisSentinelGroupOptions go;
  auto group = RedisSentinelGroup::Start(go);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  SentinelOptions o;
  for (int port : g.sentinel_ports()) o.sentinels.push_back({"127.0.0.1", port});
  o.master_name = g.master_name();

  std::mutex mu;
  std::condition_variable cv;
  int resubscribed = 0;
  std::vector<HostPort> switches;
  redis::SwitchWatcher watcher(o, [&](const std::optional<HostPort>& a) {
    std::lock_guard<std::mutex> lock(mu);
    if (a) {
      switches.push_back(*a);
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
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return !switches.empty(); }));
  EXPECT_EQ(switches.back(), (HostPort{"127.0.0.1", new_port}));
}

}  // namespace
}  // namespace sluice::testing
