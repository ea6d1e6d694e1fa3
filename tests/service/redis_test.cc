// Two sluiced processes sharing one real Redis (Debian's redis-server, started by the
// test) enforce one limit together; with Redis gone, each limit's failure mode decides.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>

#include "process.h"
#include "redis_server.h"

namespace sluice::testing {
namespace {

const char* kConfig = R"(sluiced:
  reload_poll: 0
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window_log}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: fail_open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: fail_closed}
)";

int Check(int port, const std::string& key, const std::string& value) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/check?domain=shared&key=" + key + "&value=" + value);
  return r ? r->status : 0;
}

TEST(SluicedRedis, TwoProcessesShareOneLimit) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("a.log"),
                           {"--redis", (*redis)->Url(), "--redis-timeout-ms", "5000"});
  Sluiced b = StartSluiced(dir.File("sluiced.yaml"), dir.File("b.log"),
                           {"--redis", (*redis)->Url(), "--redis-timeout-ms", "5000"});
  ASSERT_GT(a.http_port, 0);
  ASSERT_GT(b.http_port, 0);
  EXPECT_NE(a.LogText().find("store=redis://"), std::string::npos);
  int allowed = 0, denied = 0;
  for (int i = 0; i < 30; ++i) {
    const int status = Check(i % 2 ? a.http_port : b.http_port, "user", "u1");
    allowed += status == 200;
    denied += status == 429;
  }
  EXPECT_EQ(allowed, 10);
  EXPECT_EQ(denied, 20);
  // Each process alone would have allowed 10: the limit is one, not two.
  EXPECT_EQ(Check(a.http_port, "user", "u1"), 429);
  EXPECT_EQ(Check(b.http_port, "user", "u1"), 429);
  EXPECT_EQ(Check(a.http_port, "user", "u2"), 200);

  // Redis gone: fail_open allows, fail_closed denies, and the metrics say so.
  (*redis)->Stop();
  EXPECT_EQ(Check(a.http_port, "open", "x"), 200);
  EXPECT_EQ(Check(a.http_port, "closed", "x"), 429);
  httplib::Client c("127.0.0.1", a.http_port);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find(R"(sluiced_failure_policy_total{outcome="fail_open"} 1)"),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find(R"(sluiced_failure_policy_total{outcome="fail_closed"} 1)"),
            std::string::npos);
  EXPECT_NE(m->body.find("sluiced_store_errors_total 2"), std::string::npos);
}

// --redis-connections N: sluiced opens N sockets to Redis (one without the flag), and a
// value outside 1-64 is a start error that names the flag.
TEST(SluicedRedis, RedisConnectionsSetsTheSocketsItOpens) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  const auto clients = [&] { return (*redis)->ConnectedClients(); };  // sluiced's
  {
    Sluiced a = StartSluiced(
        dir.File("sluiced.yaml"), dir.File("a.log"),
        {"--redis", (*redis)->Url(), "--redis-timeout-ms", "5000", "--redis-connections", "3"});
    ASSERT_GT(a.http_port, 0);
    EXPECT_EQ(Check(a.http_port, "user", "u1"), 200);
    ASSERT_TRUE(WaitFor([&] { return clients() == 3; })) << clients() << " connections";
  }
  ASSERT_TRUE(WaitFor([&] { return clients() == 0; }));
  {
    Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("b.log"),
                             {"--redis", (*redis)->Url(), "--redis-timeout-ms", "5000"});
    ASSERT_GT(a.http_port, 0);
    EXPECT_EQ(Check(a.http_port, "user", "u2"), 200);
    ASSERT_TRUE(WaitFor([&] { return clients() >= 1; }));
    // Every socket is up long before a second decision has been answered.
    EXPECT_EQ(Check(a.http_port, "user", "u2"), 200);
    EXPECT_EQ(clients(), 1) << "sockets without --redis-connections";
  }
  ASSERT_TRUE(WaitFor([&] { return clients() == 0; }));
  for (const char* bad : {"0", "65"}) {
    auto p = Process::Spawn({SluicedBinary(), "--config", dir.File("sluiced.yaml"), "--redis",
                             (*redis)->Url(), "--redis-connections", bad},
                            dir.File(std::string("bad") + bad + ".log"));
    ASSERT_NE(p, nullptr);
    EXPECT_NE(p->Wait(std::chrono::seconds(60)), 0) << bad;
    EXPECT_NE(ReadFile(dir.File(std::string("bad") + bad + ".log")).find("--redis-connections"),
              std::string::npos)
        << bad;
  }
}

// Carry-over (issue #12 item 4): a reload that doubles a limit with `on_change:
// proportional` keeps each key's used fraction on Redis (5 of 10 used is 10 of 20 used):
// the check carries its mode to the batch script, which converts the recorded state.
TEST(SluicedRedis, ReloadWithOnChangeProportionalKeepsTheUsedFraction) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  const auto config = [](int limit, const char* algorithm) {
    return std::string("sluiced:\n  reload_poll: 0\ndomain: shared\ndescriptors:\n") +
           "  - key: user\n    rate_limit: {unit: day, requests_per_unit: " +
           std::to_string(limit) + ", on_change: proportional, algorithm: " + algorithm + "}\n";
  };
  // Token bucket and GCRA: no window boundary to race with on Redis's own clock (the
  // window algorithms' conversion is covered by EngineTest and the differential test).
  for (const char* algorithm : {"token_bucket", "gcra"}) {
    SCOPED_TRACE(algorithm);
    ASSERT_TRUE((*redis)->Command({"FLUSHALL"}).ok());
    WriteFile(dir.File("sluiced.yaml"), config(10, algorithm));
    Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File(std::string(algorithm) + ".log"),
                             {"--redis", (*redis)->Url(), "--redis-timeout-ms", "5000"});
    ASSERT_GT(a.http_port, 0);
    for (int i = 0; i < 5; ++i) ASSERT_EQ(Check(a.http_port, "user", "u1"), 200);
    WriteFile(dir.File("sluiced.yaml"), config(20, algorithm));
    a.process->Signal(SIGHUP);
    httplib::Client c("127.0.0.1", a.http_port);
    ASSERT_TRUE(WaitFor([&] {
      auto m = c.Get("/metrics");
      return m && m->body.find("sluiced_config_generation 2") != std::string::npos;
    })) << a.LogText();
    int allowed = 0;
    for (int i = 0; i < 25; ++i) allowed += Check(a.http_port, "user", "u1") == 200;
    // (both refill meanwhile at 20/day: far less than one unit during this test)
    EXPECT_EQ(allowed, 10) << "5 of 10 used must be 10 of 20 used";
  }
}

// An unreachable Redis at start is an outage (sluiced starts degraded: see
// HttpFrontEnd.StartsDegradedWhileRedisIsDown); a Redis that answers and refuses the
// password is a configuration error, which waiting would not fix: a clear start failure
// that never prints the password.
TEST(SluicedRedis, WrongPasswordAtStartIsAClearError) {
  auto redis = RedisServer::Start({.password = "right-secret"});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  auto p = Process::Spawn({SLUICED_BINARY, "--config", dir.File("sluiced.yaml"), "--http",
                           "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--redis",
                           "redis://:wrong-secret@127.0.0.1:" + std::to_string((*redis)->port())},
                          dir.File("log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(15)), 1);
  const std::string log = ReadFile(dir.File("log"));
  EXPECT_NE(log.find("event=start_failed"), std::string::npos) << log;
  EXPECT_EQ(log.find("wrong-secret"), std::string::npos) << log;
}

}  // namespace
}  // namespace sluice::testing
