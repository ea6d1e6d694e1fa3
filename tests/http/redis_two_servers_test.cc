// Two processes of the example app (examples/http_api) share one limit through a real
// redis-server: N requests spread over both get exactly the limit's worth of 2xx, then
// 429s, with consistent headers. Also: a stopped or frozen Redis is decided by the
// policy's failure mode, and requests still get answered.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "redis_server.h"

namespace {

using sluice::testing::RedisServer;

using sluice::testing::FreePort;

// One sluice_http_api process on a free loopback port; killed when destroyed.
class App {
 public:
  explicit App(std::vector<std::string> args) : port_(FreePort()) {
    args.insert(args.begin(),
                {SLUICE_HTTP_API_BIN, "--listen", "127.0.0.1:" + std::to_string(port_)});
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~App() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  // Polls /healthz (bounded) until the app answers.
  bool WaitReady() {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(0, 200'000);
    for (int i = 0; i < 200; ++i) {
      if (auto r = c.Get("/healthz"); r && r->status == 200) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;  // exited
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  int port() const { return port_; }

 private:
  int port_;
  pid_t pid_ = -1;
};

TEST(RedisTwoServers, ShareOneLimit) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  // A bucket of 6 refilled 6 per day: nothing refills during the test.
  // A generous Redis deadline: on a loaded machine a 50 ms call can time out and the
  // failure mode would then decide, which is not what this test is about.
  const std::vector<std::string> flags = {
      "--redis",      (*redis)->Url(),      "--limit", "6/d", "--algorithm",
      "token_bucket", "--redis-timeout-ms", "5000"};
  App a(flags), b(flags);
  ASSERT_TRUE(a.WaitReady());
  ASSERT_TRUE(b.WaitReady());
  httplib::Client ca = a.Client(), cb = b.Client();
  int ok = 0;
  for (int i = 0; i < 14; ++i) {
    auto res = (i % 2 == 0 ? ca : cb).Get("/api/hello");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->get_header_value("RateLimit-Policy"), "\"api\";q=6;w=86400");
    EXPECT_EQ(res->get_header_value("X-RateLimit-Limit"), "6");
    if (i < 6) {
      EXPECT_EQ(res->status, 200) << i;
      ++ok;
      // Both processes count down one shared budget.
      EXPECT_EQ(res->get_header_value("X-RateLimit-Remaining"), std::to_string(5 - i));
      EXPECT_TRUE(res->get_header_value("RateLimit")
                      .starts_with("\"api\";r=" + std::to_string(5 - i) + ";t="))
          << res->get_header_value("RateLimit");
    } else {
      EXPECT_EQ(res->status, 429) << i;
      EXPECT_EQ(res->get_header_value("X-RateLimit-Remaining"), "0");
      const long retry = std::stol(res->get_header_value("Retry-After"));
      const long reset = std::stol(res->get_header_value("X-RateLimit-Reset"));
      EXPECT_GE(retry, reset);
      EXPECT_GE(retry, 1);
      EXPECT_LE(retry, 14400);  // one token comes back every 4 h
      EXPECT_NE(res->body.find("quota-exceeded"), std::string::npos);
    }
  }
  EXPECT_EQ(ok, 6);
}

TEST(RedisTwoServers, StoreFailureFollowsTheFailureMode) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  App open({"--redis", (*redis)->Url(), "--limit", "100/min", "--failure-mode", "fail_open"});
  App closed({"--redis", (*redis)->Url(), "--limit", "100/min", "--failure-mode", "fail_closed"});
  ASSERT_TRUE(open.WaitReady());
  ASSERT_TRUE(closed.WaitReady());
  httplib::Client co = open.Client(), cc = closed.Client();
  ASSERT_EQ(co.Get("/api/hello")->status, 200);
  ASSERT_EQ(cc.Get("/api/hello")->status, 200);

  // Frozen Redis (SIGSTOP): every call runs into the store deadline, and requests are
  // still answered, as the failure mode says.
  (*redis)->Pause();
  for (int i = 0; i < 3; ++i) {
    auto r = co.Get("/api/hello");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_FALSE(r->has_header("RateLimit"));  // nothing is known about the quota
    auto c = cc.Get("/api/hello");
    ASSERT_TRUE(c) << httplib::to_string(c.error());
    EXPECT_EQ(c->status, 503);
    EXPECT_TRUE(c->has_header("Retry-After"));
    EXPECT_NE(c->body.find("temporary-reduced-capacity"), std::string::npos) << c->body;
  }
  (*redis)->Resume();

  // Stopped Redis: connection refused, same outcome.
  (*redis)->Stop();
  auto r = co.Get("/api/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto c = cc.Get("/api/hello");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 503);
}

TEST(RedisTwoServers, UnreachableRedisAtStartupIsAClearError) {
  App app({"--redis", "redis://127.0.0.1:1"});
  EXPECT_FALSE(app.WaitReady());
}

}  // namespace
