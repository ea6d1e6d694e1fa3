// Discovery and bad input on the real Sentinel group shared by this binary (the one the
// conformance and differential suites run on; nothing here fails it over): asking the
// sentinels, a name they do not know, wrong or missing sentinel credentials, none
// reachable, and one that accepts connections but never answers (a plain listening
// socket: a hostile peer no real sentinel imitates on demand). Each error is clear and
// comes within connect_timeout, from AskSentinels and from RedisStore::Create.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "redis/sentinel.h"
#include "sluice/key.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

using redis::HostPort;
using redis::SentinelOptions;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Scheduling slack on a loaded 2-core machine: the bounds are about hangs, not speed.
constexpr auto kMargin = milliseconds(1000);

SentinelOptions OptionsFor(const RedisSentinelGroup& g) {
  SentinelOptions o;
  for (int port : g.sentinel_ports()) o.sentinels.push_back({"127.0.0.1", port});
  o.master_name = g.master_name();
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

// The group's URL with `from` replaced by `to`.
std::string UrlWith(const RedisSentinelGroup& g, const std::string& from, const std::string& to) {
  std::string url = g.Url();
  const std::size_t at = url.find(from);
  if (at != std::string::npos) url.replace(at, from.size(), to);
  return url;
}

Result<std::shared_ptr<RedisStore>> Open(const std::string& url) {
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout = 500'000;
  o.on_warning = [](std::string_view) {};
  return RedisStore::Create(std::move(o));
}

TEST(SentinelDiscovery, ParsesAnnouncements) {
  auto sw = redis::ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 6380");
  ASSERT_TRUE(sw.has_value());
  EXPECT_EQ(sw->first, "mymaster");
  EXPECT_EQ(sw->second.Describe(), "127.0.0.1:6380");
  EXPECT_FALSE(redis::ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1").has_value());
  EXPECT_FALSE(redis::ParseSwitchMaster("m 1.1.1.1 1 1.1.1.1 70000").has_value());
  EXPECT_FALSE(redis::ParseSwitchMaster("m 1.1.1.1 1 1.1.1.1 12x").has_value());

  auto pr = redis::ParsePromotion("slave 127.0.0.1:6380 127.0.0.1 6380 @ mymaster 127.0.0.1 6379");
  ASSERT_TRUE(pr.has_value());
  EXPECT_EQ(pr->first, "mymaster");
  EXPECT_EQ(pr->second.Describe(), "127.0.0.1:6380");
  EXPECT_FALSE(redis::ParsePromotion("master mymaster 127.0.0.1 6379").has_value());
}

TEST(SentinelDiscovery, AnySentinelGivesThePrimary) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  SentinelOptions o = OptionsFor(*g);
  // The first two are unreachable: the next one answers.
  o.sentinels.insert(o.sentinels.begin(), {{"127.0.0.1", RefusedPort()}, {"127.0.0.1", 1}});
  auto a = redis::AskSentinels(o, 1'500'000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->Describe(), "127.0.0.1:" + std::to_string(g->primary().port()));
}

TEST(SentinelDiscovery, AnUnknownNameIsAClearErrorAtOnce) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  SentinelOptions o = OptionsFor(*g);
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
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  SentinelOptions o = OptionsFor(*g);
  o.password = "wrong";
  auto a = redis::AskSentinels(o, 1'000'000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kInvalidArgument) << a.status().ToString();
  EXPECT_NE(a.status().message().find("sentinel_password"), std::string::npos)
      << a.status().ToString();
}

TEST(SentinelDiscovery, NoReachableOrASilentSentinelStaysWithinTheBudget) {
  SentinelOptions o;
  o.master_name = "m";
  o.sentinels = {{"127.0.0.1", RefusedPort()}, {"127.0.0.1", RefusedPort()}};
  auto a = redis::AskSentinels(o, 1'000'000);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kUnavailable) << a.status().ToString();
  EXPECT_NE(a.status().message().find("no sentinel gave the address of master 'm'"),
            std::string::npos)
      << a.status().ToString();

  // A peer that accepts but never answers (a listening socket nobody reads) gets its
  // share of the budget, not all of it: the real sentinels after it still answer.
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  const int hole = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(hole, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(hole, 8), 0);
  getsockname(hole, reinterpret_cast<sockaddr*>(&addr), &len);
  SentinelOptions mixed = OptionsFor(*g);
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

TEST(SentinelStore, DecidesOnThePrimaryTheSentinelsReport) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  auto store = Open(g->Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  LimiterOptions lo;
  lo.policies = {Policy::FixedWindow("api", 2, std::chrono::hours(1))};
  lo.store = *store;
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  for (bool want : {true, true, false}) {
    auto d = (*limiter)->Acquire("lands-on-primary");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_EQ(d->allowed, want);
  }
  auto key = StoreKey("sluice", "lands-on-primary", "api");
  auto on_primary = g->primary().Command({"EXISTS", *key});
  ASSERT_TRUE(on_primary.ok());
  EXPECT_EQ(on_primary->integer, 1) << "the decision ran on the primary";
}

TEST(SentinelStore, BadSentinelInputIsAClearErrorWithinConnectTimeout) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  struct Case {
    std::string url;
    ErrorCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {UrlWith(*g, "/" + g->master_name(), "/other"), ErrorCode::kInvalidArgument,
       "does not know a master named 'other'"},
      {UrlWith(*g, "sentinel-secret", "wrong"), ErrorCode::kInvalidArgument, "sentinel_password"},
      {UrlWith(*g, "?sentinel_password=sentinel-secret", ""), ErrorCode::kInvalidArgument,
       "sentinel_password"},
      {"redis-sentinel://127.0.0.1:" + std::to_string(RefusedPort()) + "/" + g->master_name(),
       ErrorCode::kUnavailable, "no sentinel gave the address"},
      // The data nodes' password is not the sentinels'.
      {UrlWith(*g, ":node-secret@", ":wrong@"), ErrorCode::kInvalidArgument, "authentication"},
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
}

// The minimal ACL user of docs/redis.md, plus +role for the primary check, on both data
// nodes (either may be promoted): the store works with it, and without +role it is
// refused with an error that names the missing permission.
TEST(SentinelStore, TheMinimalAclUserNeedsRole) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  // (reset first: the user starts from no rules at all)
  const std::vector<std::string> minimal = [] {
    std::vector<std::string> cmd = DocumentedAclUser("placeholder", "pw");
    cmd.insert(cmd.begin() + 3, "reset");
    return cmd;
  }();
  for (RedisServer* node : {&g->primary(), &g->replica()}) {
    std::vector<std::string> with_role = minimal;
    with_role[2] = "with-role";
    with_role.push_back("+role");
    std::vector<std::string> without_role = minimal;
    without_role[2] = "without-role";
    for (const auto& cmd : {with_role, without_role}) {
      auto r = node->Command(cmd);
      ASSERT_TRUE(r.ok() && !r->is_error()) << (r.ok() ? r->str : r.status().ToString());
    }
  }
  auto ok = Open(UrlWith(*g, ":node-secret@", "with-role:pw@"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  LimiterOptions lo;
  lo.policies = {Policy::SlidingWindowLog("api", 5, std::chrono::minutes(1))};
  lo.store = *ok;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  auto d = (*limiter)->Acquire("acl-user");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->source, DecisionSource::kStore);

  auto refused = Open(UrlWith(*g, ":node-secret@", "without-role:pw@"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("+role"), std::string::npos)
      << refused.status().ToString();
}

// A sentinel ACL user (sentinel_user) with the permissions docs/redis.md gives: the
// store discovers the primary and subscribes with it.
TEST(SentinelStore, TheSentinelAclUserOfTheDocsWorks) {
  RedisSentinelGroup* g = SharedSentinelGroup();
  ASSERT_NE(g, nullptr);
  for (int i = 0; i < 3; ++i) {
    auto r = g->SentinelCommand(
        i, {"ACL", "SETUSER", "watcher", "reset", "on", ">spw", "+sentinel|get-master-addr-by-name",
            "+subscribe", "+ping", "&+switch-master", "&+failover-state-wait-promotion"});
    ASSERT_TRUE(r.ok() && !r->is_error()) << (r.ok() ? r->str : r.status().ToString());
  }
  SentinelOptions o = OptionsFor(*g);
  o.user = "watcher";
  o.password = "spw";
  auto a = redis::AskSentinels(o, 1'000'000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->port, g->primary().port());
  std::atomic<bool> subscribed{false};
  {
    redis::SwitchWatcher watcher(o, [&](const std::optional<HostPort>& at) {
      if (!at) subscribed = true;
    });
    const auto end = steady_clock::now() + std::chrono::seconds(10);
    while (!subscribed && steady_clock::now() < end) {
      std::this_thread::sleep_for(milliseconds(10));  // polling for the event
    }
  }
  EXPECT_TRUE(subscribed) << "the watcher could not subscribe as the ACL user";
  auto store = Open(UrlWith(*g, "sentinel_password=sentinel-secret",
                            "sentinel_user=watcher&sentinel_password=spw"));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
}

}  // namespace
}  // namespace sluice::testing
