// Real HTTP over loopback through the Boost.Beast adapter: exactly the limit's worth of
// 2xx, then 429s, with the right headers on both.
#include "sluice_http/beast.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "http/http_test_util.h"
#include "sluice/key.h"

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using std::chrono::minutes;
using testing::kNoon;
using testing::kSec;
using testing::MakeLimiter;

bhttp::response<bhttp::string_body> Hello(const bhttp::request<bhttp::string_body>& req) {
  bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
  res.set(bhttp::field::content_type, "application/json");
  res.keep_alive(req.keep_alive());
  res.body() = "{\"hello\":\"world\"}";
  res.prepare_payload();
  return res;
}

// A synchronous Beast server on 127.0.0.1:<free port>, one connection at a time.
class Server {
 public:
  explicit Server(MiddlewareOptions o) {
    o.limiter = limiter;
    auto mw = Middleware::Create(std::move(o));
    EXPECT_TRUE(mw.ok()) << mw.status().ToString();
    middleware = std::shared_ptr<const Middleware>(std::move(mw).value());
    acceptor.open(tcp::v4());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    acceptor.listen();
    port = acceptor.local_endpoint().port();
    thread = std::thread([this] { Serve(); });
  }
  ~Server() {
    stopping = true;
    boost::system::error_code ec;
    tcp::socket wake(io);
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    thread.join();
  }

  void Serve() {
    auto limited = BeastLimit(middleware, Hello);
    while (!stopping) {
      tcp::socket socket(io);
      boost::system::error_code ec;
      acceptor.accept(socket, ec);
      if (ec || stopping) return;
      const auto peer = socket.remote_endpoint(ec).address();
      boost::beast::flat_buffer buffer;
      while (true) {
        bhttp::request<bhttp::string_body> req;
        bhttp::read(socket, buffer, req, ec);
        if (ec) break;
        auto res = limited(req, peer);
        bhttp::write(socket, res, ec);
        if (ec || !req.keep_alive()) break;
      }
      socket.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<Limiter> limiter =
      MakeLimiter({Policy::FixedWindow("api", 5, minutes(1))}, clock);
  std::shared_ptr<const Middleware> middleware;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  unsigned short port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;
};

// A keep-alive client.
class Client {
 public:
  explicit Client(unsigned short port) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }
  bhttp::response<bhttp::string_body> Get(std::string target, std::string xff = "") {
    bhttp::request<bhttp::string_body> req{bhttp::verb::get, target, 11};
    req.set(bhttp::field::host, "127.0.0.1");
    if (!xff.empty()) req.set("X-Forwarded-For", xff);
    req.keep_alive(true);
    bhttp::write(socket, req);
    bhttp::response<bhttp::string_body> res;
    bhttp::read(socket, buffer, res);
    return res;
  }
  std::string Header(const bhttp::response<bhttp::string_body>& res, std::string_view name) {
    auto it = res.find(boost::beast::string_view(name.data(), name.size()));
    return it == res.end() ? "" : std::string(it->value());
  }

  asio::io_context io;
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
};

MiddlewareOptions ApiByIp() {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "api"}};
  return o;
}

TEST(Beast, ExactlyTheLimitThen429WithHeaders) {
  Server s(ApiByIp());
  Client c(s.port);
  for (int i = 0; i < 5; ++i) {
    auto res = c.Get("/hello?x=1");
    EXPECT_EQ(res.result_int(), 200u) << i;
    EXPECT_EQ(res.body(), "{\"hello\":\"world\"}");
    EXPECT_EQ(c.Header(res, "RateLimit-Policy"), "\"api\";q=5;w=60");
    EXPECT_EQ(c.Header(res, "RateLimit"), "\"api\";r=" + std::to_string(4 - i) + ";t=60");
    EXPECT_EQ(c.Header(res, "X-RateLimit-Limit"), "5");
    EXPECT_EQ(c.Header(res, "X-RateLimit-Remaining"), std::to_string(4 - i));
    EXPECT_EQ(c.Header(res, "X-RateLimit-Reset"), "60");
    EXPECT_EQ(c.Header(res, "Retry-After"), "");
  }
  s.clock->Advance(30 * kSec + 500'000);
  for (int i = 0; i < 3; ++i) {
    auto res = c.Get("/hello");
    EXPECT_EQ(res.result_int(), 429u);
    EXPECT_EQ(c.Header(res, "Content-Type"), "application/problem+json");
    EXPECT_EQ(c.Header(res, "Retry-After"), "30");  // 29.5 s rounded up
    EXPECT_EQ(c.Header(res, "RateLimit"), "\"api\";r=0;t=30");
    EXPECT_EQ(c.Header(res, "X-RateLimit-Reset"), "30");
    EXPECT_NE(res.body().find("\"violated-policies\":[\"api\"]"), std::string::npos) << res.body();
  }
  s.clock->Advance(30 * kSec);
  EXPECT_EQ(c.Get("/hello").result_int(), 200u);
  EXPECT_EQ(s.middleware->Stats().limited, 3u);
}

TEST(Beast, UntrustedPeerCannotSpoofXForwardedFor) {
  Server s(ApiByIp());  // no trusted proxies
  Client c(s.port);
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    ok += c.Get("/hello", "198.51.100." + std::to_string(i)).result_int() == 200 ? 1 : 0;
  }
  EXPECT_EQ(ok, 5);
}

TEST(Beast, TrustedProxyChainIsWalked) {
  MiddlewareOptions o = ApiByIp();
  o.client_ip.trusted_proxies = {"127.0.0.0/8"};
  Server s(std::move(o));
  Client c(s.port);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(c.Get("/hello", "6.6.6." + std::to_string(i) + ", 198.51.100.4").result_int(), 200u);
  }
  EXPECT_EQ(c.Get("/hello", "198.51.100.4").result_int(), 429u);
  EXPECT_EQ(c.Get("/hello", "198.51.100.5").result_int(), 200u);
  EXPECT_EQ(c.Get("/hello", std::string(4000, '[')).result_int(), 200u);  // keyed by the proxy
}

// --- concurrency limits and waiting (issue #12) -------------------------------------

TEST(Beast, PermitIsHeldUntilTheResponseIsSent) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto limiter = MakeLimiter({Policy::Concurrency("inflight", 1, std::chrono::seconds(30))}, clock);
  MiddlewareOptions o;
  o.limiter = limiter;
  o.default_limits = {{.policy = "inflight"}};
  auto mw = std::shared_ptr<const Middleware>(Middleware::Create(std::move(o)).value());
  const auto peer = asio::ip::make_address("192.0.2.1");
  const std::string key = JoinKey({"ip", "192.0.2.1"});
  bhttp::request<bhttp::string_body> req{bhttp::verb::get, "/x", 11};
  int nested_status = 0;
  auto limited = BeastLimit(mw, [&](const bhttp::request<bhttp::string_body>& r) {
    // While the handler runs, the permit is held: the same client is refused.
    auto again = BeastLimit(mw, Hello)(r, peer);
    nested_status = again.result_int();
    return Hello(r);
  });
  bool sent = false;
  limited(req, peer, [&](const auto& res) {
    sent = true;
    EXPECT_EQ(res.result_int(), 200);
    // Still held while the response is being written.
    EXPECT_EQ(limiter->Peek(key)->remaining, 0u);
  });
  EXPECT_TRUE(sent);
  EXPECT_EQ(nested_status, 429);
  // Released once send returned.
  EXPECT_EQ(limiter->Peek(key)->remaining, 1u);
  // The response-returning form releases when it returns.
  auto res = limited(req, peer);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(limiter->Peek(key)->remaining, 1u);
}

TEST(Beast, DelayedRequestWaitsBeforeTheHandler) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  MiddlewareOptions o;
  o.limiter = MakeLimiter({Policy::Gcra("rate", 1, std::chrono::seconds(2), 1)}, clock);
  o.default_limits = {{.policy = "rate"}};
  o.max_delay = 2'000'000;
  auto sleeper = std::make_shared<ManualSleeper>(clock, /*auto_advance=*/true);
  o.sleeper = sleeper;
  auto mw = std::shared_ptr<const Middleware>(Middleware::Create(std::move(o)).value());
  const auto peer = asio::ip::make_address("192.0.2.1");
  bhttp::request<bhttp::string_body> req{bhttp::verb::get, "/x", 11};
  Micros handled_at = 0;
  auto limited = BeastLimit(mw, [&](const bhttp::request<bhttp::string_body>& r) {
    handled_at = clock->Now();
    return Hello(r);
  });
  EXPECT_EQ(limited(req, peer).result_int(), 200);
  EXPECT_EQ(handled_at, kNoon);
  auto res = limited(req, peer);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(sleeper->slept(), std::vector<Micros>{2'000'000});
  EXPECT_EQ(handled_at, kNoon + 2'000'000);  // the handler ran after the wait
  EXPECT_EQ(std::string(res["Server-Timing"]), "ratelimit-delay;dur=2000");
}

}  // namespace
}  // namespace sluice::http
