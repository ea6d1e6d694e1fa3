// Envoy's failure_mode_deny, true and false, while sluiced cannot answer in time:
// killed (connection refused), stopped with SIGSTOP (accepted, never answered) and
// slower than Envoy's timeout (sluiced waits on a paused Redis longer than Envoy waits
// on sluiced). Then gRPC upstreams: a denied gRPC request gets a gRPC status, and
// rate_limited_as_resource_exhausted makes it RESOURCE_EXHAUSTED.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

#include "e2e.h"
#include "redis_server.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

constexpr const char* kConfig =
    "sluiced:\n"
    "  default_algorithm: sliding_window_log\n"
    "  reload_poll: 0\n"
    "domain: e2e\n"
    "descriptors:\n"
    "  - key: remote_address\n"
    "    rate_limit: {unit: hour, requests_per_unit: 100}\n";

enum class Fault { kKilled, kStopped, kSlow };

struct FailureCase {
  Fault fault;
  bool deny;
};

std::string Name(const ::testing::TestParamInfo<FailureCase>& i) {
  const char* f = i.param.fault == Fault::kKilled    ? "Killed"
                  : i.param.fault == Fault::kStopped ? "Stopped"
                                                     : "SlowerThanTimeout";
  return std::string(f) + (i.param.deny ? "_Deny" : "_Allow");
}

class EnvoyFailureMode : public ::testing::TestWithParam<FailureCase> {};

TEST_P(EnvoyFailureMode, DecidesByFailureModeDenyWithinEnvoysTimeout) {
  const FailureCase c = GetParam();
  std::unique_ptr<RedisServer> redis;
  std::vector<std::string> flags;
  if (c.fault == Fault::kSlow) {
    auto r = RedisServer::Start();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    redis = std::move(*r);
    // sluiced would wait 30 s for Redis: far longer than Envoy waits for sluiced.
    flags = {"--redis", redis->Url(), "--redis-timeout-ms", "30000"};
  }
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])");
  // Long enough for the first call (and its HTTP/2 connection) to a sanitizer build on a
  // loaded machine; far shorter than sluiced's 30 s wait on a paused Redis.
  o.rls_timeout = "2s";
  o.filter = {{"failure_mode_deny", c.deny}};
  auto s = StartStack(kConfig, o, flags);
  ASSERT_NE(s, nullptr);
  // The path works (and Envoy holds an HTTP/2 connection to sluiced) before the fault.
  auto before = s->Get();
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200);
  ASSERT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.ok"), 1);

  switch (c.fault) {
    case Fault::kKilled:
      s->sluiced.process->Signal(SIGKILL);
      ASSERT_EQ(s->sluiced.process->Wait(std::chrono::seconds(10)), 128 + SIGKILL);
      break;
    case Fault::kStopped:
      s->sluiced.process->Signal(SIGSTOP);  // returns once every thread is stopped
      break;
    case Fault::kSlow:
      redis->Pause();
      break;
  }
  const auto start = std::chrono::steady_clock::now();
  auto r = s->Get();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r) << "no answer from Envoy";
  if (c.deny) {
    EXPECT_EQ(r->status, 500);
    EXPECT_EQ(s->upstream.served(), 1);
    EXPECT_LE(s->envoy->Counter("cluster.upstream.ratelimit.failure_mode_allowed"), 0);
  } else {
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "upstream");
    EXPECT_EQ(s->upstream.served(), 2);
    EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.failure_mode_allowed"), 1);
  }
  // Envoy saw an error (not an answer) and no decision of sluiced's.
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.error"), 1);
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.ok"), 1);
  // Bounded by Envoy's 2 s timeout (generously: a loaded machine), never by sluiced's
  // 30 s wait on Redis.
  EXPECT_LT(took, std::chrono::seconds(15));
  if (c.fault == Fault::kStopped) s->sluiced.process->Signal(SIGCONT);
  if (c.fault == Fault::kSlow) redis->Resume();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EnvoyFailureMode,
    ::testing::Values(FailureCase{Fault::kKilled, false}, FailureCase{Fault::kKilled, true},
                      FailureCase{Fault::kStopped, false}, FailureCase{Fault::kStopped, true},
                      FailureCase{Fault::kSlow, false}, FailureCase{Fault::kSlow, true}),
    Name);

class EnvoyGrpcUpstream : public ::testing::TestWithParam<bool> {};

// A gRPC request (content-type application/grpc) that Envoy denies gets a gRPC answer:
// HTTP 200 with grpc-status UNAVAILABLE (14), or RESOURCE_EXHAUSTED (8) with
// rate_limited_as_resource_exhausted.
TEST_P(EnvoyGrpcUpstream, DeniedGrpcRequestGetsAGrpcStatus) {
  const bool exhausted = GetParam();
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])");
  o.filter = {{"rate_limited_as_resource_exhausted", exhausted}};
  auto s = StartStack(
      "sluiced:\n"
      "  default_algorithm: sliding_window_log\n"
      "  reload_poll: 0\n"
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: remote_address\n"
      "    rate_limit: {unit: hour, requests_per_unit: 1}\n",
      o);
  ASSERT_NE(s, nullptr);
  httplib::Client client("127.0.0.1", s->envoy->port());
  client.set_read_timeout(10);
  const httplib::Headers grpc = {{"te", "trailers"}};
  auto first = client.Post("/e2e.Echo/Call", grpc, std::string(5, '\0'), "application/grpc");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "upstream");  // the test upstream is plain HTTP: it got through
  auto denied = client.Post("/e2e.Echo/Call", grpc, std::string(5, '\0'), "application/grpc");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 200);
  EXPECT_EQ(denied->get_header_value("grpc-status"), exhausted ? "8" : "14");
  EXPECT_EQ(denied->get_header_value("x-envoy-ratelimited"), "true");
  EXPECT_EQ(s->upstream.served(), 1);
}

INSTANTIATE_TEST_SUITE_P(AsResourceExhausted, EnvoyGrpcUpstream, ::testing::Bool());

// The fixture's Envoy closes an idle connection to the upstream itself, after 1 s,
// before the upstream (httplib, 5 s) does: otherwise a request sent as the upstream
// closes the connection gets a 503 (seen once in EnvoyRlqs, whose rounds wait ~5 s for
// Envoy's reports). Waits for Envoy's own count of idle closes, then a request passes.
TEST(EnvoyFixture, ClosesIdleUpstreamConnectionsBeforeTheUpstreamDoes) {
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])");
  auto s = StartStack(kConfig, o);
  ASSERT_NE(s, nullptr);
  auto first = s->Get("/");
  ASSERT_TRUE(first) << "no answer";
  EXPECT_EQ(first->status, 200);
  ASSERT_TRUE(
      WaitUntil([&] { return s->envoy->Counter("cluster.upstream.upstream_cx_idle_timeout") >= 1; },
                std::chrono::seconds(30)))
      << "Envoy kept its idle upstream connection; cx_destroy_remote "
      << s->envoy->Counter("cluster.upstream.upstream_cx_destroy_remote");
  auto again = s->Get("/");
  ASSERT_TRUE(again) << "no answer";
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(s->upstream.served(), 2);
}

}  // namespace
}  // namespace sluice::testing
