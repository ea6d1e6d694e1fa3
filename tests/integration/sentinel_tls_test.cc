// rediss-sentinel:// against a real Sentinel group over TLS (data nodes and sentinels
// serve TLS, `tls-replication yes`, so the sentinels report TLS ports; certificates made
// by openssl in the test): the store discovers the primary and decides over TLS, follows
// a SENTINEL FAILOVER to the new primary, and `sluice check` and `sluice bench` work over it.
#include <gtest/gtest.h>

#include <chrono>

#include "cli_runner.h"
#include "redis_sentinel.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_limiter.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
constexpr auto kMargin = milliseconds(1500);  // scheduling slack on a loaded machine

TEST(SentinelTls, DecidesFollowsAFailoverAndSluiceCheckWorks) {
  auto certs = TestCerts::Make();
  ASSERT_TRUE(certs.ok()) << certs.status().ToString();
  RedisSentinelGroupOptions go;
  go.password = "node-secret";
  go.tls = certs->get();
  auto group = RedisSentinelGroup::Start(go);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  const std::string url = g.TlsUrl();

  RedisStoreOptions so;
  so.url = url;
  so.call_timeout = 200'000;
  so.connect_timeout = 2'000'000;
  so.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto limiter = StoreOnlyLimiter(*store, "api", 1'000'000);
  ASSERT_TRUE(limiter.ok());
  auto first = (*limiter)->Acquire("before");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->source, DecisionSource::kStore);
  // The key is on the primary (its plain port, the fixture's view), written over TLS.
  auto keys = g.primary().Command({"DBSIZE"});
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->integer, 1);

  CliOutcome cli = RunCli(SLUICE_CLI_BIN, {"check", "--key", "cli:tls", "--rate", "5/min",
                                           "--redis", url, "--connect-timeout", "2s"});
  EXPECT_EQ(cli.rc, 0) << cli.Describe();
  EXPECT_NE(cli.out.find("allowed: 4 of 5 left"), std::string::npos) << cli.Describe();
  CliOutcome bench = RunBench(SLUICE_CLI_BIN, url);
  EXPECT_EQ(BenchProblems(bench), "") << bench.Describe();

  // An untrusted certificate: exit 3 naming the verification, within --connect-timeout.
  std::string untrusted = url;
  untrusted.replace(untrusted.find("ca.crt"), 6, "other.crt");
  CliOutcome bad = RunCli(SLUICE_CLI_BIN, {"check", "--key", "cli:tls", "--rate", "5/min",
                                           "--redis", untrusted, "--connect-timeout", "1s"});
  EXPECT_EQ(bad.rc, 3) << bad.Describe();
  EXPECT_NE(bad.err.find("certificate verify failed"), std::string::npos) << bad.Describe();
  EXPECT_LT(bad.took, milliseconds(1000) + kMargin);

  // A failover: the store follows the sentinels (over TLS) to the new primary.
  RedisServer* old_primary = &g.primary();
  ASSERT_TRUE(g.Failover().ok());
  RedisServer* new_primary = &g.primary();
  ASSERT_NE(new_primary, old_primary);
  bool moved = false;
  int errors = 0;
  const auto end = steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; !moved && steady_clock::now() < end; ++i) {
    auto d = (*limiter)->Acquire("after" + std::to_string(i));
    if (!d.ok()) {
      ++errors;
      continue;
    }
    if (d->source != DecisionSource::kStore) continue;
    auto there = new_primary->Command({"EXISTS", "sluice:{after" + std::to_string(i) + "}:api"});
    moved = there.ok() && there->integer == 1;
  }
  EXPECT_TRUE(moved) << "no decision reached the new primary within 60 s";
  EXPECT_EQ(errors, 0);
}

}  // namespace
}  // namespace sluice::testing
