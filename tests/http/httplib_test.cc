// Real HTTP over loopback through the cpp-httplib adapter: a client sends N requests and
// gets exactly the limit's worth of 2xx, then 429s, with the right headers on both.
#include "sluice_http/httplib.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "http/http_test_util.h"
#include "sluice/key.h"
#include "support/wait.h"

namespace sluice::http {
namespace {

using std::chrono::minutes;
using testing::kNoon;
using testing::kSec;
using testing::MakeLimiter;

// An httplib server with the middleware on 127.0.0.1:<free port>, serving until destroyed.
class Server {
 public:
  explicit Server(MiddlewareOptions o, const std::string& host = "127.0.0.1",
                  std::vector<Policy> policies = {Policy::FixedWindow("api", 5, minutes(1)),
                                                  Policy::FixedWindow("login", 2, minutes(1))},
                  std::shared_ptr<ManualClock> manual = nullptr) {
    if (manual) clock = std::move(manual);
    limiter = MakeLimiter(std::move(policies), clock);
    o.limiter = limiter;
    auto mw = Middleware::Create(std::move(o));
    EXPECT_TRUE(mw.ok()) << mw.status().ToString();
    middleware = std::shared_ptr<const Middleware>(std::move(mw).value());
    InstallHttplib(server, middleware);
    server.Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"hello\":\"world\"}", "application/json");
    });
    // Issue #21: a handler that reports the cost the client asks for (X-Want-Cost) in
    // X-Tokens-Used, and answers the status it asks for (X-Want-Status).
    server.Post("/chat", [](const httplib::Request& req, httplib::Response& res) {
      if (req.has_header("X-Want-Cost")) {
        res.set_header("X-Tokens-Used", req.get_header_value("X-Want-Cost"));
      }
      if (req.has_header("X-Want-Status")) {
        res.status = std::stoi(req.get_header_value("X-Want-Status"));
      }
      res.set_content("ok", "text/plain");
    });
    // Issue #12: a handler that "sleeps" until the test lets it go (no timers).
    server.Get("/slow", [this](const httplib::Request&, httplib::Response& res) {
      slow_entered.set_value();
      slow_go.wait();
      res.set_content("done", "text/plain");
    });
    port = server.bind_to_any_port(host);
    EXPECT_GT(port, 0);
    thread = std::thread([this] { server.listen_after_bind(); });
    // Bounded wait for the accept loop (connections queue in the backlog meanwhile).
    for (int i = 0; i < 2000 && !server.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~Server() {
    server.stop();
    thread.join();
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<Limiter> limiter;
  std::promise<void> slow_entered;
  std::promise<void> slow_release;
  std::shared_future<void> slow_go = slow_release.get_future().share();
  std::shared_ptr<const Middleware> middleware;
  httplib::Server server;
  int port = 0;
  std::thread thread;
};

MiddlewareOptions ApiByIp() {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "api"}};
  return o;
}

TEST(Httplib, ExactlyTheLimitThen429WithHeaders) {
  Server s(ApiByIp());
  httplib::Client client("127.0.0.1", s.port);
  client.set_keep_alive(true);
  for (int i = 0; i < 5; ++i) {
    auto res = client.Get("/hello");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << i;
    EXPECT_EQ(res->body, "{\"hello\":\"world\"}");
    EXPECT_EQ(res->get_header_value("RateLimit-Policy"), "\"api\";q=5;w=60");
    EXPECT_EQ(res->get_header_value("RateLimit"), "\"api\";r=" + std::to_string(4 - i) + ";t=60");
    EXPECT_EQ(res->get_header_value("X-RateLimit-Limit"), "5");
    EXPECT_EQ(res->get_header_value("X-RateLimit-Remaining"), std::to_string(4 - i));
    EXPECT_EQ(res->get_header_value("X-RateLimit-Reset"), "60");
    EXPECT_FALSE(res->has_header("Retry-After"));
  }
  s.clock->Advance(20 * kSec);
  for (int i = 0; i < 3; ++i) {
    auto res = client.Get("/hello");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 429);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/problem+json");
    EXPECT_EQ(res->get_header_value("Retry-After"), "40");
    EXPECT_EQ(res->get_header_value("RateLimit"), "\"api\";r=0;t=40");
    EXPECT_EQ(res->get_header_value("X-RateLimit-Remaining"), "0");
    EXPECT_EQ(res->get_header_value("X-RateLimit-Reset"), "40");
    EXPECT_NE(res->body.find("quota-exceeded"), std::string::npos) << res->body;
  }
  // Unknown paths are limited too (the check runs before routing).
  auto res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  s.clock->Advance(40 * kSec);
  res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->get_header_value("X-RateLimit-Remaining"), "4");
  EXPECT_EQ(s.middleware->Stats().limited, 4u);
}

TEST(Httplib, UntrustedPeerCannotSpoofXForwardedFor) {
  MiddlewareOptions o = ApiByIp();
  o.client_ip.trusted_proxies = {"10.0.0.0/8"};  // loopback is not a trusted proxy
  Server s(std::move(o));
  httplib::Client client("127.0.0.1", s.port);
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    // A fresh spoofed address on every request.
    auto res = client.Get("/hello", {{"X-Forwarded-For", "198.51.100." + std::to_string(i)}});
    ASSERT_TRUE(res);
    ok += res->status == 200 ? 1 : 0;
  }
  EXPECT_EQ(ok, 5);
}

TEST(Httplib, TrustedProxyChainIsWalked) {
  MiddlewareOptions o = ApiByIp();
  o.client_ip.trusted_proxies = {"127.0.0.0/8", "::1"};
  Server s(std::move(o));
  httplib::Client client("127.0.0.1", s.port);
  for (int i = 0; i < 5; ++i) {
    auto res = client.Get("/hello", {{"X-Forwarded-For",
                                      "6.6.6." + std::to_string(i) + ", 198.51.100.4, 127.0.0.2"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  auto res = client.Get("/hello", {{"X-Forwarded-For", "198.51.100.4"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);  // the same forwarded client
  res = client.Get("/hello", {{"X-Forwarded-For", "198.51.100.5"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);  // another forwarded client
  // Malformed or oversized: keyed by the proxy (the peer), never a crash.
  for (const std::string& bad : {std::string("garbage"), std::string(6000, ','),
                                 std::string("[") + std::string(3000, ':')}) {
    res = client.Get("/hello", {{"X-Forwarded-For", bad}});
    ASSERT_TRUE(res);
    EXPECT_TRUE(res->status == 200 || res->status == 429) << res->status;
  }
  EXPECT_EQ(s.middleware->ClientIp(Request{"GET", "/", "127.0.0.1", nullptr}), "127.0.0.1");
}

TEST(Httplib, ExemptRouteAndPerRoutePolicy) {
  MiddlewareOptions o = ApiByIp();
  o.routes = {{.path = "/healthz", .exempt = true},
              {.method = "POST", .path = "/login", .limits = {{.policy = "login"}}}};
  Server s(std::move(o));
  s.server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  s.server.Post("/login", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  httplib::Client client("127.0.0.1", s.port);
  for (int i = 0; i < 10; ++i) {
    auto res = client.Get("/healthz");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_FALSE(res->has_header("RateLimit"));
  }
  EXPECT_EQ(client.Post("/login", "", "text/plain")->status, 200);
  EXPECT_EQ(client.Post("/login", "", "text/plain")->status, 200);
  auto res = client.Post("/login", "", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("RateLimit-Policy"), "\"login\";q=2;w=60");
}

TEST(Httplib, Ipv6PeerIsKeyedByItsPrefix) {
  Server s(ApiByIp(), "::1");
  httplib::Client client("::1", s.port);
  int ok = 0;
  for (int i = 0; i < 8; ++i) {
    auto res = client.Get("/hello");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ok += res->status == 200 ? 1 : 0;
  }
  EXPECT_EQ(ok, 5);
  // The IPv6 peer's /64 is the key.
  EXPECT_EQ(s.limiter->Peek(JoinKey({"ip", "::/64"}))->remaining, 0u);
}

// --- concurrency limits and waiting (issue #12) -------------------------------------

// Waits (bounded) until `done()`: the adapter releases a permit on httplib's worker
// thread after the response was written, which may be just after the client read it.
// The bound is generous (30 s) for a loaded CI machine; a passing run returns as soon
// as the release has happened.
template <class F>
bool Eventually(F done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the poll step
  }
  return done();
}

TEST(Httplib, SlowHandlerHoldsAPermitUntilItsResponseIsSent) {
  MiddlewareOptions o;
  o.routes = {{.path = "/slow", .limits = {{.policy = "inflight"}}}};
  Server s(std::move(o), "127.0.0.1",
           {Policy::Concurrency("inflight", 1, std::chrono::seconds(30))});
  const std::string key = JoinKey({"ip", "127.0.0.1"});
  std::future<httplib::Result> first = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port);
    return c.Get("/slow");
  });
  ASSERT_EQ(s.slow_entered.get_future().wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  EXPECT_EQ(s.limiter->Peek(key)->remaining, 0u);
  // In flight: a second request is 429 with Retry-After from the permit's expiry.
  httplib::Client client("127.0.0.1", s.port);
  auto second = client.Get("/slow");
  ASSERT_TRUE(second) << httplib::to_string(second.error());
  EXPECT_EQ(second->status, 429);
  EXPECT_EQ(second->get_header_value("Retry-After"), "30");
  EXPECT_EQ(second->get_header_value("RateLimit-Policy"),
            "\"inflight\";q=1;qu=\"concurrent-requests\"");
  // The handler finishes; its response is sent; the permit is released.
  s.slow_release.set_value();
  auto r = first.get();
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "done");
  ASSERT_TRUE(Eventually([&] { return s.limiter->Peek(key)->remaining == 1; }));
  auto third = client.Get("/hello");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 200);  // /hello has no limit here; the permit was not leaked
  EXPECT_EQ(s.limiter->Stats().permit_release_errors, 0u);
}

TEST(Httplib, DelayedRequestWaitsThroughTheInjectedSleeper) {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "rate"}};
  o.max_delay = 3'000'000;
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto sleeper = std::make_shared<ManualSleeper>(clock, /*auto_advance=*/true);
  o.sleeper = sleeper;
  Server s(std::move(o), "127.0.0.1", {Policy::Gcra("rate", 1, std::chrono::seconds(3), 1)}, clock);
  httplib::Client client("127.0.0.1", s.port);
  auto a = client.Get("/hello");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_FALSE(a->has_header("Server-Timing"));
  auto b = client.Get("/hello");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(b->get_header_value("Server-Timing"), "ratelimit-delay;dur=3000");
  EXPECT_EQ(sleeper->slept(), std::vector<Micros>{3'000'000});  // simulated: nothing slept
  EXPECT_EQ(s.middleware->Stats().delayed, 1u);
}

// Issue #21, Route::after through cpp-httplib: the check only looks, and the server's
// logger charges the written response's X-Tokens-Used (or nothing for a status the
// route does not count). The test waits for each charge (Stats().charged), which the
// logger makes after the client already has its response.
TEST(Httplib, RouteChargedAfterTheResponseTakesTheReportedCost) {
  MiddlewareOptions o;
  o.routes = {{.path = "/chat",
               .limits = {{.policy = "api"}},
               .after = AfterResponse{.cost_header = "X-Tokens-Used", .statuses = {200}}}};
  Server s(std::move(o), "127.0.0.1", {Policy::FixedWindow("api", 10, minutes(1))});
  httplib::Client client("127.0.0.1", s.port);
  std::uint64_t charged = 0;
  auto post = [&](const std::string& cost, const std::string& status) {
    httplib::Headers h = {{"X-Want-Cost", cost}, {"X-Want-Status", status}};
    auto res = client.Post("/chat", h, "", "text/plain");
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    return res ? res->status : -1;
  };
  auto wait_charged = [&](std::uint64_t n) {
    EXPECT_TRUE(sluice::testing::WaitUntil([&] { return s.middleware->Stats().charged >= n; },
                                           std::chrono::seconds(10)));
  };
  EXPECT_EQ(post("4", "200"), 200);
  wait_charged(++charged);
  EXPECT_EQ(post("9", "500"), 500);  // not a counted status: charges nothing
  EXPECT_TRUE(sluice::testing::WaitUntil([&] { return s.middleware->Stats().not_counted >= 1; },
                                         std::chrono::seconds(10)));
  EXPECT_EQ(post("6", "200"), 200);  // 6 left: the look passes, the 6 are taken
  wait_charged(++charged);
  EXPECT_EQ(post("1", "200"), 429);  // all 10 used
  EXPECT_EQ(s.middleware->Stats().bad_costs, 0u);
}

}  // namespace
}  // namespace sluice::http
