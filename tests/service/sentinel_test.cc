// sluiced on a Sentinel-managed Redis (a real group started by the test): two
// processes share one limit through the sentinels' primary, and the limit survives a
// failover (the state was replicated; both processes follow the new primary); and one
// process over rediss-sentinel:// (TLS sentinels and data nodes).
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "process.h"
#include "redis_sentinel.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

const char* kConfig = R"(sluiced:
  reload_poll: 0
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window_log, failure_mode: fail_closed}
)";

int Check(int port, const std::string& value) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/check?domain=shared&key=user&value=" + value);
  return r ? r->status : 0;
}

TEST(SluicedSentinel, TwoProcessesShareOneLimitAcrossAFailover) {
  RedisSentinelGroupOptions go;
  go.sentinel_password = "sentinel-secret";
  auto group = RedisSentinelGroup::Start(go);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  const std::string url = (*group)->Url();
  Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("a.log"), {"--redis", url});
  Sluiced b = StartSluiced(dir.File("sluiced.yaml"), dir.File("b.log"), {"--redis", url});
  ASSERT_GT(a.http_port, 0) << a.LogText();
  ASSERT_GT(b.http_port, 0) << b.LogText();
  int allowed = 0;
  for (int i = 0; i < 14; ++i) allowed += Check(i % 2 ? a.http_port : b.http_port, "u1") == 200;
  EXPECT_EQ(allowed, 10);

  RedisServer& old = (*group)->primary();
  ASSERT_TRUE((*group)->Failover().ok());
  // Both follow the new primary, where the replicated state still denies u1, and a
  // fresh key is counted there (bounded wait for the switch, polling real processes).
  bool moved = false;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; !moved && std::chrono::steady_clock::now() < end; ++i) {
    const std::string fresh = "after" + std::to_string(i);
    moved = Check(a.http_port, fresh) == 200 && Check(b.http_port, fresh) == 200;
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(moved) << a.LogText() << b.LogText();
  EXPECT_EQ(Check(a.http_port, "u1"), 429);
  EXPECT_EQ(Check(b.http_port, "u1"), 429);
  // The fresh keys were written on the new primary, not on the old one (which stays a
  // master until Sentinel demotes it, and does not replicate from the new one).
  auto on_new = (*group)->primary().Command({"KEYS", "*after*"});
  auto on_old = old.Command({"KEYS", "*after*"});
  ASSERT_TRUE(on_new.ok() && on_old.ok());
  EXPECT_FALSE(on_new->elements.empty());
  EXPECT_TRUE(on_old->elements.empty()) << "a process kept writing to the old primary";
}

// rediss-sentinel://: the sentinels and the data nodes serve TLS (certificates made by
// openssl in the test); sluiced finds the primary through them and decides there.
TEST(SluicedSentinelTls, DecidesOverRedissSentinel) {
  auto certs = TestCerts::Make();
  ASSERT_TRUE(certs.ok()) << certs.status().ToString();
  RedisSentinelGroupOptions go;
  go.password = "node-secret";
  go.tls = certs->get();
  auto group = RedisSentinelGroup::Start(go);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  const std::string url = (*group)->TlsUrl();
  Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("a.log"), {"--redis", url});
  ASSERT_GT(a.http_port, 0) << a.LogText();
  int allowed = 0;
  for (int i = 0; i < 12; ++i) allowed += Check(a.http_port, "u1") == 200;
  EXPECT_EQ(allowed, 10) << a.LogText();
  // The state was written on the primary (its plain port, the fixture's view).
  auto on_primary = (*group)->primary().Command({"KEYS", "*u1*"});
  ASSERT_TRUE(on_primary.ok());
  EXPECT_FALSE(on_primary->elements.empty());
}

}  // namespace
}  // namespace sluice::testing
