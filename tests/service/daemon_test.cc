// sluiced as a real process: Envoy-shaped gRPC requests through the generated stub, the
// HTTP JSON API, bad input, reload (SIGHUP and file change) under load, and SIGTERM.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "process.h"

namespace sluice::testing {
namespace {

namespace pb = ::envoy::service::ratelimit::v3;

// Long windows (hour, day) with the exact sliding log: counts cannot change while a test
// runs, whatever the wall clock does.
const char* kConfig = R"(sluiced:
  max_body_bytes: 4096
  reload_poll: 0
  default_algorithm: sliding_window_log
domain: rl
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3, name: per_ip}
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
)";

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config = dir.File("sluiced.yaml");
    WriteFile(config, kConfig);
    d = StartSluiced(config, dir.File("sluiced.log"));
    ASSERT_GT(d.http_port, 0);
    stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(d.grpc_port), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Call(const pb::RateLimitRequest& req, pb::RateLimitResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub->ShouldRateLimit(&ctx, req, resp);
  }
  static void Add(pb::RateLimitRequest& req,
                  std::vector<std::pair<std::string, std::string>> entries) {
    auto* d = req.add_descriptors();
    for (const auto& [k, v] : entries) {
      auto* e = d->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
  }
  httplib::Client Http() {
    httplib::Client c("127.0.0.1", d.http_port);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(5, 0);
    return c;
  }
  // GET /v1/check for one key/value; returns the HTTP status (0 if no answer).
  int Check(const std::string& key, const std::string& value, const std::string& domain = "rl") {
    auto c = Http();
    auto r = c.Get("/v1/check?domain=" + domain + "&key=" + key + "&value=" + value);
    return r ? r->status : 0;
  }
  std::string Metrics() {
    auto c = Http();
    auto r = c.Get("/metrics");
    return r ? r->body : "";
  }
  bool WaitForGeneration(int g) {
    return WaitFor([&] {
      return Metrics().find("sluiced_config_generation " + std::to_string(g)) != std::string::npos;
    });
  }

  TempDir dir;
  std::string config;
  Sluiced d;
  std::unique_ptr<pb::RateLimitService::Stub> stub;
};

TEST_F(DaemonTest, GrpcLimitsAndPerDescriptorStatuses) {
  for (int i = 1; i <= 4; ++i) {
    pb::RateLimitRequest req;
    req.set_domain("rl");
    Add(req, {{"remote_address", "10.1.1.1"}});
    Add(req, {{"path", "/free"}});
    Add(req, {{"nothing", "matches"}});
    pb::RateLimitResponse resp;
    ASSERT_TRUE(Call(req, &resp).ok());
    ASSERT_EQ(resp.statuses_size(), 3);
    const auto& s0 = resp.statuses(0);
    if (i <= 3) {
      EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK) << i;
      EXPECT_EQ(s0.code(), pb::RateLimitResponse::OK);
      EXPECT_EQ(s0.limit_remaining(), static_cast<unsigned>(3 - i));
    } else {
      EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
      EXPECT_EQ(s0.code(), pb::RateLimitResponse::OVER_LIMIT);
      EXPECT_EQ(s0.limit_remaining(), 0u);
      bool retry_after = false;
      for (const auto& h : resp.response_headers_to_add()) retry_after |= h.key() == "retry-after";
      EXPECT_TRUE(retry_after);
    }
    EXPECT_EQ(s0.current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(s0.current_limit().unit(), pb::RateLimitResponse::RateLimit::HOUR);
    EXPECT_EQ(s0.current_limit().name(), "per_ip");
    EXPECT_GT(s0.duration_until_reset().seconds(), 0);
    EXPECT_LE(s0.duration_until_reset().seconds(), 3600);
    // Unlimited and unmatched descriptors: OK without a limit.
    EXPECT_EQ(resp.statuses(1).code(), pb::RateLimitResponse::OK);
    EXPECT_FALSE(resp.statuses(1).has_current_limit());
    EXPECT_EQ(resp.statuses(2).code(), pb::RateLimitResponse::OK);
    EXPECT_FALSE(resp.statuses(2).has_current_limit());
  }
}

TEST_F(DaemonTest, GrpcHitsAddend) {
  pb::RateLimitRequest req;
  req.set_domain("rl");
  req.set_hits_addend(4);
  Add(req, {{"api_key", "k1"}});
  pb::RateLimitResponse resp;
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 1u);
  // 4 more do not fit in the 1 left: over limit, nothing taken.
  resp.Clear();
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  // A per-descriptor hits_addend overrides the request's.
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value(1);
  resp.Clear();
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 0u);
}

// envoyproxy/ratelimit's reading of hits_addend: the request's 0 means 1, a descriptor's
// 0 only looks (charges nothing), and a descriptor's UInt64Value above 2^32 (the most
// one check may cost) is INVALID_ARGUMENT naming it, charging nothing (it was accepted
// before, as a cost like any other).
TEST_F(DaemonTest, GrpcHitsAddendZeroPeeksAndAbove32BitsIsInvalid) {
  pb::RateLimitRequest req;
  req.set_domain("rl");
  Add(req, {{"api_key", "k9"}});
  pb::RateLimitResponse resp;
  ASSERT_TRUE(Call(req, &resp).ok());  // hits_addend 0 on the request: a cost of 1
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 4u);
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  resp.Clear();
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 4u);  // a peek
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value(4294967297ull);
  resp.Clear();
  grpc::Status s = Call(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "descriptors[0].hits_addend is larger than 4294967296");
  req.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  resp.Clear();
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.statuses(0).limit_remaining(), 4u);  // nothing was charged
}

TEST_F(DaemonTest, GrpcUnknownDomainAndInvalidRequests) {
  pb::RateLimitRequest req;
  req.set_domain("no-such-domain");
  Add(req, {{"remote_address", "1.1.1.1"}});
  pb::RateLimitResponse resp;
  for (int i = 0; i < 5; ++i) {
    resp.Clear();
    ASSERT_TRUE(Call(req, &resp).ok());
    EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);
    ASSERT_EQ(resp.statuses_size(), 1);
    EXPECT_FALSE(resp.statuses(0).has_current_limit());
  }
  pb::RateLimitRequest empty;
  empty.set_domain("rl");
  grpc::Status s = Call(empty, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "descriptors must not be empty");

  pb::RateLimitRequest many;
  many.set_domain("rl");
  for (int i = 0; i < 17; ++i) Add(many, {{"api_key", std::to_string(i)}});
  s = Call(many, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("too many descriptors"), std::string::npos);

  pb::RateLimitRequest no_entries;
  no_entries.set_domain("rl");
  no_entries.add_descriptors();
  // envoyproxy/ratelimit answers a descriptor without entries OK (no limit applies).
  EXPECT_EQ(Call(no_entries, &resp).error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);

  pb::RateLimitRequest huge;
  huge.set_domain("rl");
  Add(huge, {{"api_key", std::string(8000, 'x')}});
  EXPECT_EQ(Call(huge, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Still serving.
  resp.Clear();
  ASSERT_TRUE(Call(req, &resp).ok());
}

TEST_F(DaemonTest, HttpJsonLikeEnvoyproxyRatelimit) {
  auto c = Http();
  const std::string body =
      R"({"domain":"rl","descriptors":[{"entries":[{"key":"remote_address","value":"7.7.7.7"}]}],"hits_addend":3})";
  auto r = c.Post("/json", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("overallCode":"OK")"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("currentLimit":{"requestsPerUnit":3,"unit":"HOUR","name":"per_ip"})"),
            std::string::npos)
      << r->body;
  r = c.Post("/json", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find(R"("overallCode":"OVER_LIMIT")"), std::string::npos) << r->body;
  // camelCase field names are accepted too.
  r = c.Post(
      "/json",
      R"({"domain":"rl","hitsAddend":1,"descriptors":[{"entries":[{"key":"api_key","value":"j"}]}]})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("limitRemaining":4)"), std::string::npos) << r->body;
}

TEST_F(DaemonTest, HttpCheckEndpoint) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Check("remote_address", "8.8.8.8"), 200);
  auto c = Http();
  auto r = c.Get("/v1/check?domain=rl&key=remote_address&value=8.8.8.8");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("X-RateLimit-Limit"), "3");
  EXPECT_EQ(r->get_header_value("X-RateLimit-Remaining"), "0");
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  EXPECT_NE(r->body.find(R"("allowed":false)"), std::string::npos);
  r = c.Get("/v1/check?key=a&value=b");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("missing query parameter 'domain'"), std::string::npos);
  r = c.Get("/v1/check?domain=rl&key=a");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = c.Get("/v1/check?domain=rl&key=a&value=b&hits=-1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // hits=0 peeks: it reports without charging (it used to count as 1).
  for (int i = 0; i < 3; ++i) {
    r = c.Get("/v1/check?domain=rl&key=remote_address&value=9.9.9.9&hits=0");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << i;
    EXPECT_EQ(r->get_header_value("X-RateLimit-Remaining"), "3") << i;
  }
  EXPECT_EQ(Check("remote_address", "9.9.9.9"), 200);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 200);
}

TEST_F(DaemonTest, BadHttpInputGetsClearErrorsAndServiceContinues) {
  auto c = Http();
  auto r = c.Post("/json", R"({"domain": "rl", "descriptors": [)", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("invalid JSON request"), std::string::npos) << r->body;

  r = c.Post("/json",
             R"({"domain":"rl","descriptors":[{"entries":[{"key":"a","value":"b"}]}],"extra":1})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("extra"), std::string::npos) << r->body;

  r = c.Post("/json", R"({"domain":"rl","descriptors":[]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("descriptors must not be empty"), std::string::npos) << r->body;

  std::string many = R"({"domain":"rl","descriptors":[)";
  for (int i = 0; i < 17; ++i) {
    many += std::string(i ? "," : "") + R"({"entries":[{"key":"k","value":")" + std::to_string(i) +
            R"("}]})";
  }
  many += "]}";
  r = c.Post("/json", many, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("too many descriptors: 17 (at most 16)"), std::string::npos) << r->body;

  r = c.Post("/json", std::string(10000, ' ') + "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("larger than max_body_bytes (4096)"), std::string::npos) << r->body;

  r = c.Post(
      "/json",
      R"({"domain":"rl","hits_addend":-4,"descriptors":[{"entries":[{"key":"a","value":"b"}]}]})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);

  EXPECT_EQ(Check("remote_address", "still-serving"), 200);
  const std::string m = Metrics();
  EXPECT_NE(m.find(R"(sluiced_requests_total{api="json",outcome="invalid"} 5)"), std::string::npos)
      << m;
}

TEST_F(DaemonTest, ReloadUnderLoadDropsNothingAndAppliesTheChange) {
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", d.http_port);
      c.set_read_timeout(5, 0);
      for (int i = 0; !stop.load() || i < 50; ++i) {
        auto r = c.Get("/v1/check?domain=rl&key=api_key&value=t" + std::to_string(t) + "-" +
                       std::to_string(i % 200));
        if (r && (r->status == 200 || r->status == 429)) {
          answered.fetch_add(1);
        } else {
          failed.fetch_add(1);
        }
      }
    });
  }
  WaitFor([&] { return answered.load() >= 100; });
  std::string v2 = kConfig;
  v2 += "  - key: new_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
  WriteFile(config, v2);
  d.process->Signal(SIGHUP);
  ASSERT_TRUE(WaitForGeneration(2)) << d.LogText();
  const int at_reload = answered.load();
  WaitFor([&] { return answered.load() >= at_reload + 100; });
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(answered.load(), at_reload + 100);
  EXPECT_EQ(Check("new_key", "x"), 200);
  EXPECT_EQ(Check("new_key", "x"), 429);
  EXPECT_NE(d.LogText().find("event=config_loaded reason=sighup"), std::string::npos);
}

TEST_F(DaemonTest, InvalidReloadIsRefusedWithFileAndLineAndOldLimitsKeepWorking) {
  EXPECT_EQ(Check("remote_address", "5.5.5.5"), 200);
  std::string bad = kConfig;
  bad += "  - key: broken\n    rate_limit: {unit: hour, requests_per_unit: 1, colour: red}\n";
  WriteFile(config, bad);
  d.process->Signal(SIGHUP);
  const std::string where = config + ":15: unknown field 'colour' in rate_limit";
  ASSERT_TRUE(WaitFor([&] { return d.LogText().find(where) != std::string::npos; })) << d.LogText();
  EXPECT_NE(d.LogText().find("event=config_rejected"), std::string::npos);
  // Invalid YAML too.
  WriteFile(config, std::string(kConfig) + "  - key: [oops\n");
  d.process->Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return d.LogText().find("invalid YAML") != std::string::npos; }))
      << d.LogText();
  EXPECT_NE(Metrics().find(R"(sluiced_config_reloads_total{result="failed"} 2)"),
            std::string::npos);
  // The old limits (3 per hour per address, counted so far) still apply.
  EXPECT_EQ(Check("remote_address", "5.5.5.5"), 200);
  EXPECT_EQ(Check("remote_address", "5.5.5.5"), 200);
  EXPECT_EQ(Check("remote_address", "5.5.5.5"), 429);
  EXPECT_NE(Metrics().find("sluiced_config_generation 1"), std::string::npos);
}

TEST_F(DaemonTest, SigtermFinishesAndExitsZero) {
  std::atomic<bool> stop{false};
  std::atomic<int> malformed{0}, answered{0};
  std::thread client([&] {
    httplib::Client c("127.0.0.1", d.http_port);
    while (!stop.load()) {
      auto r = c.Get("/v1/check?domain=rl&key=api_key&value=term");
      if (r) {
        answered.fetch_add(1);
        if (r->status != 200 && r->status != 429) malformed.fetch_add(1);
      }
    }
  });
  WaitFor([&] { return answered.load() >= 20; });
  d.process->Signal(SIGTERM);
  EXPECT_EQ(d.process->Wait(std::chrono::seconds(15)), 0) << d.LogText();
  stop = true;
  client.join();
  EXPECT_EQ(malformed.load(), 0);
  EXPECT_NE(d.LogText().find("event=stopped"), std::string::npos);
}

TEST(DaemonFileWatch, ChangedFileIsReloadedWithoutSignal) {
  TempDir dir;
  const std::string config = dir.File("watch.yaml");
  const std::string base = R"(sluiced: {reload_poll: 20ms}
domain: w
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding_window_log}
)";
  WriteFile(config, base);
  Sluiced d = StartSluiced(config, dir.File("log"));
  ASSERT_GT(d.http_port, 0);
  httplib::Client c("127.0.0.1", d.http_port);
  auto check = [&](const std::string& v) {
    auto r = c.Get("/v1/check?domain=w&key=k&value=" + v);
    return r ? r->status : 0;
  };
  EXPECT_EQ(check("a"), 200);
  EXPECT_EQ(check("a"), 429);
  std::string v2 = base;
  v2.replace(v2.find("requests_per_unit: 1"), 20, "requests_per_unit: 9");
  WriteFile(config, v2);
  ASSERT_TRUE(WaitFor([&] { return d.LogText().find("reason=file_changed") != std::string::npos; }))
      << d.LogText();
  // A new limit (9/hour) is a new policy: fresh state.
  for (int i = 0; i < 9; ++i) EXPECT_EQ(check("a"), 200) << i;
  EXPECT_EQ(check("a"), 429);
}

TEST(DaemonStartup, InvalidConfigFailsWithFileAndLine) {
  TempDir dir;
  const std::string config = dir.File("bad.yaml");
  WriteFile(config,
            "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, "
            "requests_per_unit: 1}\n");
  auto p = Process::Spawn({SLUICED_BINARY, "--config", config}, dir.File("log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(10)), 1);
  EXPECT_NE(ReadFile(dir.File("log")).find(config + ":4: unit must be second, minute, hour, day"),
            std::string::npos)
      << ReadFile(dir.File("log"));
}

// rate_limits: several limits on one descriptor, through the real binary: enforced
// together (a denial by one charges none), each reported by /v1/check, /json, gRPC, the
// headers, /rlconfig and --check-config.
TEST(DaemonSeveralLimits, EnforcedTogetherAndEachReported) {
  TempDir dir;
  const std::string config = dir.File("multi.yaml");
  WriteFile(config, R"(sluiced:
  reload_poll: 0
  default_algorithm: sliding_window_log
domain: m
descriptors:
  - key: user
    rate_limits:
      - {unit: hour, requests_per_unit: 2, name: hourly}
      - {unit: day, requests_per_unit: 3, name: daily}
)");
  // /rlconfig is on the admin listener; --public-rlconfig keeps it on this port.
  Sluiced d = StartSluiced(config, dir.File("sluiced.log"), {"--public-rlconfig"});
  ASSERT_GT(d.http_port, 0);
  httplib::Client c("127.0.0.1", d.http_port);
  c.set_read_timeout(5, 0);
  for (int i = 0; i < 2; ++i) {
    auto r = c.Get("/v1/check?domain=m&key=user&value=a");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << i;
  }
  auto r = c.Get("/v1/check?domain=m&key=user&value=a");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("X-RateLimit-Limit"),
            "2, 2;w=3600;name=\"hourly\", 3;w=86400;name=\"daily\"");
  EXPECT_EQ(r->get_header_value("X-RateLimit-Remaining"), "0");
  // The binding limit first, then each limit; the denied request charged neither.
  EXPECT_NE(r->body.find(R"("name":"hourly")"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("limits":[{"code":"OVER_LIMIT","limit":2,)"), std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find(R"({"code":"OK","limit":3,"name":"daily","remaining":1,)"),
            std::string::npos)
      << r->body;

  // /json: Envoy's shape; the descriptor's status is its binding limit.
  const std::string body =
      R"({"domain":"m","descriptors":[{"entries":[{"key":"user","value":"b"}]}],"hits_addend":2})";
  auto j = c.Post("/json", body, "application/json");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->status, 200);
  EXPECT_NE(j->body.find(R"("currentLimit":{"requestsPerUnit":2,"unit":"HOUR","name":"hourly"})"),
            std::string::npos)
      << j->body;
  // gRPC: one more for b is over the hourly limit (2 of 2 used).
  auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(d.grpc_port), grpc::InsecureChannelCredentials()));
  pb::RateLimitRequest req;
  req.set_domain("m");
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("user");
  e->set_value("b");
  pb::RateLimitResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(stub->ShouldRateLimit(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(resp.statuses(0).current_limit().name(), "hourly");

  auto rl = c.Get("/rlconfig");
  ASSERT_TRUE(rl);
  EXPECT_NE(rl->body.find("m.user#1: unit=HOUR requests_per_unit=2, shadow_mode: false, name: "
                          "hourly"),
            std::string::npos)
      << rl->body;
  EXPECT_NE(rl->body.find("m.user#2: unit=DAY requests_per_unit=3, shadow_mode: false, name: "
                          "daily"),
            std::string::npos)
      << rl->body;

  auto p = Process::Spawn({SLUICED_BINARY, "--check-config", config}, dir.File("check.log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 0);
  const std::string out = ReadFile(dir.File("check.log"));
  EXPECT_NE(out.find("[user] #1 of 2 -> 2/hour sliding_window_log fail_open name=hourly (line 8)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[user] #2 of 2 -> 3/day sliding_window_log fail_open name=daily (line 9)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("1 domain(s), 2 limit(s)"), std::string::npos) << out;
}

std::string Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get(path);
  return r ? std::to_string(r->status) + " " + r->body : "no answer";
}

// The embedded store's key cap from the file, the environment and the flag (flag wins),
// shown as gauges; at the cap new keys are decided by failure mode, counted and logged
// as key_cap, not as over_limit.
TEST(DaemonKeyCap, SetByFileEnvOrFlagAndReportedApartFromOverLimit) {
  TempDir dir;
  const std::string config = dir.File("cap.yaml");
  WriteFile(config, R"(sluiced:
  reload_poll: 0
  max_keys: 5
domain: c
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding_window_log}
)");
  {
    Sluiced d = StartSluiced(config, dir.File("file.log"));
    ASSERT_GT(d.http_port, 0);
    EXPECT_NE(Get(d.http_port, "/metrics").find("sluiced_store_max_keys{store=\"embedded\"} 5"),
              std::string::npos);
  }
  ::setenv("SLUICED_MAX_KEYS", "4", 1);
  {
    Sluiced d = StartSluiced(config, dir.File("env.log"));
    ASSERT_GT(d.http_port, 0);
    EXPECT_NE(Get(d.http_port, "/metrics").find("sluiced_store_max_keys{store=\"embedded\"} 4"),
              std::string::npos);
  }
  Sluiced d = StartSluiced(config, dir.File("flag.log"), {"--max-keys", "2"});
  ::unsetenv("SLUICED_MAX_KEYS");
  ASSERT_GT(d.http_port, 0);
  // The readiness probe peeks (holds no key): two keys fit.
  EXPECT_EQ(Get(d.http_port, "/v1/check?domain=c&key=k&value=a").substr(0, 3), "200");
  EXPECT_EQ(Get(d.http_port, "/v1/check?domain=c&key=k&value=a").substr(0, 3), "429");
  EXPECT_EQ(Get(d.http_port, "/v1/check?domain=c&key=k&value=b").substr(0, 3), "200");
  // At the cap: fail_open lets a new key through, counted as key_cap.
  EXPECT_EQ(Get(d.http_port, "/v1/check?domain=c&key=k&value=c").substr(0, 3), "200");
  const std::string m = Get(d.http_port, "/metrics");
  EXPECT_NE(m.find("sluiced_store_max_keys{store=\"embedded\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("sluiced_store_keys{store=\"embedded\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("descriptor=\"k\",outcome=\"key_cap\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("descriptor=\"k\",outcome=\"over_limit\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("sluiced_key_cap_refusals_total 1"), std::string::npos) << m;
  EXPECT_TRUE(WaitFor([&] {
    return d.LogText().find("event=key_cap_reached") != std::string::npos;
  })) << d.LogText();
  EXPECT_NE(d.LogText().find("store=embedded keys=2 max_keys=2 refused=1"), std::string::npos)
      << d.LogText();
}

// http_threads meant nothing since the event-driven front end and was accepted silently:
// it is refused with FILE:LINE and its replacement, at start and by --check-config.
TEST(DaemonStartup, HttpThreadsIsRefusedWithFileAndLine) {
  TempDir dir;
  const std::string config = dir.File("old.yaml");
  WriteFile(config, "sluiced:\n  http_threads: 64\ndomain: x\n");
  for (const char* flag : {"--config", "--check-config"}) {
    auto p = Process::Spawn({SLUICED_BINARY, flag, config}, dir.File(std::string(flag) + ".log"));
    ASSERT_TRUE(p);
    EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 1) << flag;
    const std::string log = ReadFile(dir.File(std::string(flag) + ".log"));
    EXPECT_NE(log.find(config + ":2: http_threads is no longer supported"), std::string::npos)
        << log;
    EXPECT_NE(log.find("--http-io-threads"), std::string::npos) << log;
  }
}

TEST(DaemonStartup, HelpDocumentsEveryFlag) {
  TempDir dir;
  auto p = Process::Spawn({SLUICED_BINARY, "--help"}, dir.File("log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(10)), 0);
  const std::string help = ReadFile(dir.File("log"));
  for (const char* flag : {"--config", "--http", "--grpc", "--redis"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << "\n" << help;
  }
}

}  // namespace
}  // namespace sluice::testing
