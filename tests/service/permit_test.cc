// sluiced's concurrency limits over HTTP (issue #12): POST /v1/acquire, /v1/release and
// /v1/extend through the real HTTP front end in process, on the embedded store with a
// manual clock (expiry, extend) and on a real redis-server (tests/support); bad input
// (missing or malformed permits, unknown and expired ones) answered 400/404 with a
// reason; the rate APIs refuse a concurrency limit.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "redis_cluster.h"
#include "redis_server.h"
#include "service/config.h"
#include "service/engine.h"
#include "service/http_server.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::service {
namespace {

constexpr Micros kSec = 1'000'000;
constexpr Micros kNoon = 1785412800LL * kSec;

const char* kConfig = R"(domain: jobs
descriptors:
  - key: tenant
    rate_limit:
      concurrency: 2
      lease: 30s
      name: in_flight
  - key: mixed
    rate_limits:
      - {concurrency: 5, lease: 10s, name: slots}
      - {unit: hour, requests_per_unit: 3, name: hourly}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 10}
)";

// An engine on `store` behind the HTTP front end on 127.0.0.1:<free port>.
class Daemon {
 public:
  explicit Daemon(std::shared_ptr<Store> store, std::shared_ptr<const Clock> clock = nullptr,
                  const char* config = kConfig) {
    auto c = ParseConfig(config, "permits.yaml");
    EXPECT_TRUE(c.ok()) << c.status().message();
    auto e = Engine::Create(*c, Engine::Options{std::move(store), std::move(clock)});
    EXPECT_TRUE(e.ok()) << e.status().message();
    engine = std::move(*e);
    HttpOptions o;
    o.io_threads = 1;
    auto s = HttpServer::Start(*engine, "127.0.0.1:0", o, &ready);
    EXPECT_TRUE(s.ok()) << s.status().message();
    server = std::move(*s);
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
  }

  httplib::Result Post(const std::string& target, const std::string& body = "") {
    return client->Post(target.c_str(), body, "application/x-www-form-urlencoded");
  }
  // POST /v1/acquire for tenant `t`; the permit token, or "" when not 200.
  std::string Acquire(const std::string& key, const std::string& value, int* status = nullptr,
                      httplib::Response* out = nullptr) {
    auto r = Post("/v1/acquire?domain=jobs&key=" + key + "&value=" + value);
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    if (!r) return "";
    if (status) *status = r->status;
    std::string permit;
    if (r->status == 200) permit = nlohmann::json::parse(r->body).at("permit").get<std::string>();
    if (out) *out = *r;
    return permit;
  }
  int Release(const std::string& permit, std::string* body = nullptr) {
    auto r = Post("/v1/release", "permit=" + permit);
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    if (!r) return 0;
    if (body) *body = r->body;
    return r->status;
  }

  std::atomic<bool> ready{true};
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> server;
  std::unique_ptr<httplib::Client> client;
};

// Acquire to the limit, 429 with Retry-After, release, acquire again; double release and
// unknown permits are 404 with a reason. The same on every store.
void AcquireReleaseCycle(Daemon& d) {
  httplib::Response first;
  int status = 0;
  const std::string a = d.Acquire("tenant", "t1", &status, &first);
  ASSERT_EQ(status, 200) << first.body;
  const auto j = nlohmann::json::parse(first.body);
  EXPECT_EQ(j.at("allowed"), true);
  EXPECT_EQ(j.at("unit"), "concurrent");
  EXPECT_EQ(j.at("limit"), 2);
  EXPECT_EQ(j.at("remaining"), 1);
  EXPECT_EQ(j.at("lease_ms"), 30000);
  EXPECT_EQ(first.get_header_value("X-RateLimit-Limit"), "2");
  const std::string b = d.Acquire("tenant", "t1", &status);
  ASSERT_EQ(status, 200);
  EXPECT_NE(a, b);
  // Full: 429 with Retry-After (until the earliest permit's expiry, at most its lease).
  httplib::Response denied;
  EXPECT_EQ(d.Acquire("tenant", "t1", &status, &denied), "");
  ASSERT_EQ(status, 429) << denied.body;
  const long retry = std::stol(denied.get_header_value("Retry-After"));
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 30);
  EXPECT_EQ(nlohmann::json::parse(denied.body).at("remaining"), 0);
  // Another tenant has its own permits.
  EXPECT_NE(d.Acquire("tenant", "t2", &status), "");
  // Release one: a slot is free again.
  EXPECT_EQ(d.Release(a), 200);
  const std::string c = d.Acquire("tenant", "t1", &status);
  EXPECT_EQ(status, 200);
  // Releasing twice, or a permit never acquired: 404 naming it.
  std::string body;
  EXPECT_EQ(d.Release(a, &body), 404);
  EXPECT_NE(body.find(a.substr(0, 32)), std::string::npos) << body;
  EXPECT_NE(body.find("not held"), std::string::npos) << body;
  std::string forged = a;
  forged[0] = forged[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(d.Release(forged), 404);
  EXPECT_EQ(d.Release(b), 200);
  EXPECT_EQ(d.Release(c), 200);
}

TEST(SluicedPermits, AcquireReleaseOnTheEmbeddedStore) {
  Daemon d(std::make_shared<MemoryStore>(), std::make_shared<ManualClock>(kNoon));
  AcquireReleaseCycle(d);
}

TEST(SluicedPermits, AcquireReleaseOnRedis) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  auto store = testing::OpenPatientStore((*redis)->Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Daemon d(*store);
  AcquireReleaseCycle(d);
  // The permit set lives in Redis: a second engine on the same Redis sees the slots.
  auto other_store = testing::OpenPatientStore((*redis)->Url());
  ASSERT_TRUE(other_store.ok()) << other_store.status().ToString();
  Daemon other(*other_store);
  int status = 0;
  const std::string a = d.Acquire("tenant", "shared", &status);
  const std::string b = other.Acquire("tenant", "shared", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(d.Acquire("tenant", "shared", &status), "");
  EXPECT_EQ(status, 429);
  // A permit taken through one daemon is released through the other (the token says all).
  EXPECT_EQ(other.Release(a), 200);
  EXPECT_NE(d.Acquire("tenant", "shared", &status), "");
}

TEST(SluicedPermits, ExpiresAfterItsLeaseAndExtendKeepsIt) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  Daemon d(std::make_shared<MemoryStore>(), clock);
  int status = 0;
  const std::string a = d.Acquire("tenant", "t", &status);
  clock->Advance(10 * kSec);
  const std::string b = d.Acquire("tenant", "t", &status);
  ASSERT_EQ(status, 200);
  clock->Advance(15 * kSec);
  // a is 25 s old: extending it gives it a fresh 30 s lease (until 55 s).
  auto ext = d.Post("/v1/extend", "permit=" + a);
  ASSERT_TRUE(ext);
  ASSERT_EQ(ext->status, 200) << ext->body;
  EXPECT_EQ(nlohmann::json::parse(ext->body).at("lease_ms"), 30000);
  clock->Advance(16 * kSec);  // 41 s: b (taken at 10 s) has expired; a has not
  EXPECT_NE(d.Acquire("tenant", "t", &status), "");
  EXPECT_EQ(d.Acquire("tenant", "t", &status), "");
  EXPECT_EQ(status, 429);
  // The expired permit cannot be released or extended: 404.
  EXPECT_EQ(d.Release(b), 404);
  auto late = d.Post("/v1/extend", "permit=" + b);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 404) << late->body;
  EXPECT_EQ(d.Release(a), 200);
}

TEST(SluicedPermits, RateAndConcurrencyLimitsOfOneDescriptorAreAllOrNothing) {
  Daemon d(std::make_shared<MemoryStore>(), std::make_shared<ManualClock>(kNoon));
  int status = 0;
  // hourly allows 3 acquisitions; releasing refunds nothing of the rate.
  for (int i = 0; i < 3; ++i) {
    const std::string p = d.Acquire("mixed", "m", &status);
    ASSERT_EQ(status, 200) << i;
    EXPECT_EQ(d.Release(p), 200);
  }
  httplib::Response denied;
  EXPECT_EQ(d.Acquire("mixed", "m", &status, &denied), "");
  ASSERT_EQ(status, 429);
  const auto j = nlohmann::json::parse(denied.body);
  ASSERT_EQ(j.at("limits").size(), 2u) << denied.body;
  EXPECT_EQ(j.at("limits")[1].at("code"), "OVER_LIMIT");
  // The denied acquisition took no slot: all 5 are free.
  EXPECT_EQ(j.at("limits")[0].at("remaining"), 5) << denied.body;
}

TEST(SluicedPermits, BadInputIsAnsweredWithAReason) {
  Daemon d(std::make_shared<MemoryStore>(), std::make_shared<ManualClock>(kNoon));
  auto r = d.Post("/v1/release");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("missing parameter 'permit'"), std::string::npos) << r->body;
  r = d.Post("/v1/release", "permit=nonsense");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("not a permit token"), std::string::npos) << r->body;
  r = d.Post("/v1/extend", "permit=0123456789abcdef0123456789abcdef.%21%21");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  // No concurrency limit on the descriptor: /v1/acquire says so.
  r = d.Post("/v1/acquire?domain=jobs&key=plain&value=x");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("no concurrency limit matches"), std::string::npos) << r->body;
  r = d.Post("/v1/acquire?domain=jobs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // Acquire changes state: GET is refused.
  auto g = d.client->Get("/v1/acquire?domain=jobs&key=tenant&value=t");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 405);
  // The rate APIs cannot release a permit: a concurrency limit there is a 400 naming
  // the endpoints that work (gRPC and /json go through the same check).
  auto c = d.client->Get("/v1/check?domain=jobs&key=tenant&value=t");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 400);
  EXPECT_NE(c->body.find("/v1/acquire"), std::string::npos) << c->body;
  auto js = d.client->Post(
      "/json", R"({"domain":"jobs","descriptors":[{"entries":[{"key":"tenant","value":"t"}]}]})",
      "application/json");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 400) << js->body;
}

// Issue #20 item 2: with the store unreachable, /v1/extend and /v1/release answer 503
// with a reason under every failure mode: never 200 (fail_open: nothing was extended)
// nor 404 (fail_closed: the permit is still held). Once the store is back the permit is
// extended and released as usual.
const char* kFailureModesConfig = R"(domain: jobs
descriptors:
  - key: open
    rate_limit: {concurrency: 2, lease: 30s, name: open_slots, failure_mode: fail_open}
  - key: closed
    rate_limit: {concurrency: 2, lease: 30s, name: closed_slots, failure_mode: fail_closed}
)";

// `pause(true)` makes the store's Redis refuse to run scripts (CLIENT PAUSE WRITE,
// bounded; WRITE so that the test's own CLIENT UNPAUSE still runs) and drops the
// connections whose scripts it holds back; `pause(false)` ends it.
void PermitOperationsFailWhileThePauseLasts(Daemon& d, const std::function<void(bool)>& pause) {
  for (const std::string key : {"open", "closed"}) {
    int status = 0;
    const std::string permit = d.Acquire(key, "p", &status);
    ASSERT_EQ(status, 200) << key;
    pause(true);
    for (const char* op : {"/v1/extend", "/v1/release"}) {
      auto r = d.Post(op, "permit=" + permit);
      ASSERT_TRUE(r) << key << " " << op;
      EXPECT_EQ(r->status, 503) << key << " " << op << ": " << r->body;
      EXPECT_NE(r->body.find("error"), std::string::npos) << r->body;
    }
    pause(false);
    // The store reconnects in the background, each of the node's connections on its own
    // (2, OpenStore's default). A connection the pause's CLIENT KILL closed may still
    // look up until its I/O thread reads the close, and a call sent on it then fails
    // (RedisStoreOptions::connections: "calls on it fail at once"), which on a loaded
    // machine happens after another connection is back already. So wait until the
    // extend is answered 4 times in a row: a lone caller's calls alternate between the
    // connections that are up, so each answered since the pause ended.
    int extended = 0, in_a_row = 0;
    EXPECT_TRUE(testing::WaitUntil([&] {
      auto r = d.Post("/v1/extend", "permit=" + permit);
      extended = r ? r->status : 0;
      in_a_row = extended == 503 || extended == 0 ? 0 : in_a_row + 1;
      return in_a_row == 4 || (extended != 503 && extended != 200 && extended != 0);
    }));
    EXPECT_EQ(extended, 200) << key << ": the permit was kept";
    EXPECT_EQ(d.Release(permit), 200) << key;
    EXPECT_EQ(d.Release(permit), 404) << key;
  }
}

// Postponed clients are killed so that their held-back scripts never run after the
// pause (the store gave up on them at its deadline).
Status PauseNode(const std::function<Result<redis::Reply>(const std::vector<std::string>&)>& cmd,
                 bool pause) {
  const std::vector<std::vector<std::string>> cmds =
      pause ? std::vector<std::vector<std::string>>{{"CLIENT", "PAUSE", "30000", "WRITE"}}
            : std::vector<std::vector<std::string>>{{"CLIENT", "KILL", "TYPE", "normal"},
                                                    {"CLIENT", "UNPAUSE"}};
  for (const auto& c : cmds) {
    auto r = cmd(c);
    if (!r.ok()) return r.status();
  }
  return Status::Ok();
}

TEST(SluicedPermits, ExtendAndReleaseAnswer503WhileRedisIsPaused) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  auto store = OpenStore((*redis)->Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Daemon d(*store, nullptr, kFailureModesConfig);
  PermitOperationsFailWhileThePauseLasts(d, [&](bool pause) {
    const Status s = PauseNode([&](const auto& c) { return (*redis)->Command(c); }, pause);
    ASSERT_TRUE(s.ok()) << s.ToString();
  });
}

TEST(SluicedPermits, ExtendAndReleaseAnswer503WhileTheClusterIsPaused) {
  auto cluster = testing::RedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto store = OpenStore((*cluster)->Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Daemon d(*store, nullptr, kFailureModesConfig);
  PermitOperationsFailWhileThePauseLasts(d, [&](bool pause) {
    for (std::size_t i = 0; i < (*cluster)->size(); ++i) {
      const Status s = PauseNode([&](const auto& c) { return (*cluster)->Command(i, c); }, pause);
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    }
  });
}

TEST(SluicedPermits, TokenRoundTrips) {
  RateLimitRequest req;
  req.domain = "d\x01:";
  req.descriptors.resize(2);
  req.descriptors[0].entries = {{"k", "v\0w"}, {"", std::string_view("\xff\x00", 2)}};
  req.descriptors[1].entries = {{"a", "b"}};
  const std::string id = "0123456789abcdef0123456789abcdef";
  const std::string token = EncodePermitToken(id, req);
  std::string got_id, storage;
  RateLimitRequest got;
  ASSERT_TRUE(DecodePermitToken(token, &got_id, &storage, &got).ok());
  EXPECT_EQ(got_id, id);
  EXPECT_EQ(got.domain, req.domain);
  ASSERT_EQ(got.descriptors.size(), 2u);
  ASSERT_EQ(got.descriptors[0].entries.size(), 2u);
  EXPECT_EQ(got.descriptors[0].entries[0].value, req.descriptors[0].entries[0].value);
  EXPECT_EQ(got.descriptors[0].entries[1].value, std::string_view("\xff\x00", 2));
  EXPECT_EQ(got.descriptors[1].entries[0].key, "a");
  // Truncated or altered tokens are refused, never misread.
  for (std::size_t cut = 0; cut < token.size(); ++cut) {
    EXPECT_FALSE(DecodePermitToken(token.substr(0, cut), &got_id, &storage, &got).ok()) << cut;
  }
}

}  // namespace
}  // namespace sluice::service
