// The middleware over a real Limiter on a manual clock: routes, keys, headers, 429
// bodies, exemptions, shadow mode, failure modes and configuration errors.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "http/http_test_util.h"
#include "sluice/key.h"

namespace sluice::http {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;
using testing::FailingStore;
using testing::FakeHeaders;
using testing::HeaderOf;
using testing::kNoon;
using testing::kSec;
using testing::MakeLimiter;

struct Fixture {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<Limiter> limiter;
  std::unique_ptr<Middleware> mw;

  Fixture(std::vector<Policy> policies, MiddlewareOptions o,
          std::shared_ptr<Store> store = nullptr) {
    limiter = MakeLimiter(std::move(policies), clock, std::move(store));
    o.limiter = limiter;
    auto r = Middleware::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) mw = std::move(r).value();
  }

  Verdict Get(std::string_view path, std::string_view peer, const FakeHeaders* h = nullptr,
              std::string_view method = "GET") {
    Request r{method, path, peer, h};
    return mw->Check(r);
  }
};

MiddlewareOptions ByIp(std::string policy) {
  MiddlewareOptions o;
  o.default_limits = {{.policy = std::move(policy)}};
  return o;
}

TEST(Middleware, AllowsTheLimitThenAnswers429WithHeaders) {
  Fixture f({Policy::FixedWindow("api", 5, minutes(1))}, ByIp("api"));
  for (int i = 0; i < 5; ++i) {
    Verdict v = f.Get("/items", "192.0.2.1");
    ASSERT_TRUE(v.pass()) << i;
    EXPECT_EQ(HeaderOf(v, "RateLimit-Policy"), "\"api\";q=5;w=60");
    EXPECT_EQ(HeaderOf(v, "RateLimit"), "\"api\";r=" + std::to_string(4 - i) + ";t=60");
    EXPECT_EQ(HeaderOf(v, "X-RateLimit-Limit"), "5");
    EXPECT_EQ(HeaderOf(v, "X-RateLimit-Remaining"), std::to_string(4 - i));
    EXPECT_EQ(HeaderOf(v, "X-RateLimit-Reset"), "60");
    EXPECT_EQ(HeaderOf(v, "Retry-After"), "");
  }
  f.clock->Advance(15 * kSec + 1);  // 44.999999 s left in the window
  Verdict v = f.Get("/items", "192.0.2.1");
  ASSERT_EQ(v.status, 429);
  EXPECT_EQ(HeaderOf(v, "Retry-After"), "45");
  EXPECT_EQ(HeaderOf(v, "RateLimit"), "\"api\";r=0;t=45");
  EXPECT_EQ(HeaderOf(v, "X-RateLimit-Remaining"), "0");
  EXPECT_EQ(HeaderOf(v, "X-RateLimit-Reset"), "45");
  EXPECT_EQ(v.content_type, "application/problem+json");
  EXPECT_NE(
      v.body.find("\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\""),
      std::string::npos)
      << v.body;
  EXPECT_NE(v.body.find("\"status\":429"), std::string::npos) << v.body;
  EXPECT_NE(v.body.find("\"violated-policies\":[\"api\"]"), std::string::npos) << v.body;
  // Another client is unaffected.
  EXPECT_TRUE(f.Get("/items", "192.0.2.2").pass());
  // The window rolls: allowed again.
  f.clock->Advance(45 * kSec);
  EXPECT_TRUE(f.Get("/items", "192.0.2.1").pass());
  const MiddlewareStats st = f.mw->Stats();
  EXPECT_EQ(st.requests, 8u);
  EXPECT_EQ(st.limited, 1u);
  EXPECT_EQ(st.allowed, 7u);
}

TEST(Middleware, RetryAfterNeverEarlierThanTheAnnouncedResetForEveryAlgorithm) {
  const std::vector<Policy> all = {
      Policy::FixedWindow("fw", 3, seconds(10)),
      Policy::SlidingWindowLog("swl", 3, seconds(10)),
      Policy::SlidingWindowCounter("swc", 3, seconds(10)),
      Policy::TokenBucket("tb", 3, 1, seconds(3)),
      Policy::Gcra("gcra", 3, seconds(10), 3),
  };
  for (const Policy& p : all) {
    Fixture f({p}, ByIp(p.name));
    int denials = 0;
    for (int i = 0; i < 200; ++i) {
      Verdict v = f.Get("/", "192.0.2.1");
      if (!v.pass()) {
        ++denials;
        ASSERT_EQ(v.status, 429);
        const long retry = std::stol(HeaderOf(v, "Retry-After"));
        const long reset = std::stol(HeaderOf(v, "X-RateLimit-Reset"));
        const std::string rl = HeaderOf(v, "RateLimit");
        const long t = std::stol(rl.substr(rl.find(";t=") + 3));
        EXPECT_GE(retry, reset) << p.name;
        EXPECT_GE(retry, t) << p.name;
        EXPECT_GE(retry, 1) << p.name;
        // Waiting Retry-After is enough for one request to pass.
        Decision peek = *f.limiter->Peek(JoinKey({"ip", "192.0.2.1"}));
        EXPECT_LE(peek.retry_after, retry * kSec) << p.name;
      }
      f.clock->Advance(137'000 * (i % 7));
    }
    EXPECT_GT(denials, 0) << p.name;
  }
}

TEST(Middleware, SeveralPoliciesPerRouteAreReportedTogether) {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "burst"}, {.policy = "daily"}};
  Fixture f({Policy::FixedWindow("burst", 2, seconds(1)),
             Policy::FixedWindow("daily", 3, std::chrono::hours(24))},
            std::move(o));
  Verdict v = f.Get("/", "192.0.2.1");
  ASSERT_TRUE(v.pass());
  EXPECT_EQ(HeaderOf(v, "RateLimit-Policy"), "\"burst\";q=2;w=1, \"daily\";q=3;w=86400");
  // Fixed windows are epoch-aligned: at noon UTC the day window has 12 h left.
  EXPECT_EQ(HeaderOf(v, "RateLimit"), "\"burst\";r=1;t=1, \"daily\";r=2;t=43200");
  // The legacy trio describes the binding (least remaining) policy.
  EXPECT_EQ(HeaderOf(v, "X-RateLimit-Limit"), "2");
  EXPECT_EQ(HeaderOf(v, "X-RateLimit-Remaining"), "1");
  ASSERT_TRUE(f.Get("/", "192.0.2.1").pass());
  v = f.Get("/", "192.0.2.1");
  ASSERT_EQ(v.status, 429);
  EXPECT_NE(v.body.find("\"violated-policies\":[\"burst\"]"), std::string::npos) << v.body;
  EXPECT_EQ(HeaderOf(v, "Retry-After"), "1");
  f.clock->Advance(kSec);
  ASSERT_TRUE(f.Get("/", "192.0.2.1").pass());  // daily: 3 of 3 used
  v = f.Get("/", "192.0.2.1");
  f.clock->Advance(kSec);
  v = f.Get("/", "192.0.2.1");
  ASSERT_EQ(v.status, 429);
  EXPECT_NE(v.body.find("\"violated-policies\":[\"daily\"]"), std::string::npos) << v.body;
  EXPECT_EQ(HeaderOf(v, "X-RateLimit-Limit"), "3");
  EXPECT_EQ(HeaderOf(v, "Retry-After"), std::to_string(43200 - 2));
}

TEST(Middleware, PerRoutePoliciesAndRouteKeys) {
  MiddlewareOptions o;
  o.routes = {
      {.method = "POST", .path = "/login", .limits = {{.policy = "login"}}},
      {.name = "items",
       .path = "/items/*",
       .limits = {{.policy = "items", .key = {KeyPart::kClientIp, KeyPart::kRoute}}}},
      {.path = "/healthz", .exempt = true},
  };
  o.default_limits = {{.policy = "api"}};
  Fixture f(
      {Policy::FixedWindow("api", 100, minutes(1)), Policy::FixedWindow("login", 1, minutes(1)),
       Policy::FixedWindow("items", 2, minutes(1))},
      std::move(o));
  EXPECT_TRUE(f.Get("/login", "192.0.2.1", nullptr, "POST").pass());
  EXPECT_EQ(f.Get("/login", "192.0.2.1", nullptr, "POST").status, 429);
  // GET /login is not the POST route: default limits.
  EXPECT_EQ(HeaderOf(f.Get("/login", "192.0.2.1"), "RateLimit-Policy"), "\"api\";q=100;w=60");
  // /items/1 and /items/2 share the route's key.
  EXPECT_TRUE(f.Get("/items/1", "192.0.2.1").pass());
  EXPECT_TRUE(f.Get("/items/2", "192.0.2.1").pass());
  EXPECT_EQ(f.Get("/items/3", "192.0.2.1").status, 429);
  EXPECT_EQ(f.limiter->Peek(JoinKey({"ip", "192.0.2.1", "route", "items"}))->remaining, 0u);
  // Exempt: never limited, no headers.
  for (int i = 0; i < 200; ++i) {
    Verdict v = f.Get("/healthz", "192.0.2.1");
    ASSERT_TRUE(v.pass());
    ASSERT_TRUE(v.headers.empty());
  }
}

TEST(Middleware, ApiKeyUserAndMissingIdentities) {
  MiddlewareOptions o;
  o.routes = {
      {.path = "/key/*", .limits = {{.policy = "p", .key = {KeyPart::kApiKey}}}},
      {.path = "/user/*",
       .limits = {{.policy = "p", .key = {KeyPart::kUser}, .on_missing = MissingIdentity::kSkip}}},
  };
  o.user = [](const Request& r) {
    std::string_view v;
    return r.headers && r.headers->Get("X-User", 0, &v) ? std::string(v) : std::string();
  };
  Fixture f({Policy::FixedWindow("p", 2, minutes(1))}, std::move(o));
  FakeHeaders k1{{"x-api-key", " k1 "}};
  // The same API key from two addresses shares one budget.
  EXPECT_TRUE(f.Get("/key/a", "192.0.2.1", &k1).pass());
  EXPECT_TRUE(f.Get("/key/a", "198.51.100.7", &k1).pass());
  EXPECT_EQ(f.Get("/key/a", "203.0.113.5", &k1).status, 429);
  EXPECT_EQ(f.limiter->Peek(JoinKey({"key", "k1"}))->remaining, 0u);
  // No API key: keyed by the client IP instead.
  EXPECT_TRUE(f.Get("/key/a", "192.0.2.1").pass());
  EXPECT_EQ(f.limiter->Peek(JoinKey({"ip", "192.0.2.1"}))->remaining, 1u);
  // A user id from the application.
  FakeHeaders u{{"X-User", "alice:admin"}};
  EXPECT_TRUE(f.Get("/user/x", "192.0.2.1", &u).pass());
  EXPECT_EQ(f.limiter->Peek(JoinKey({"user", "alice:admin"}))->remaining, 1u);
  // Anonymous with kSkip: not limited, no headers.
  for (int i = 0; i < 10; ++i) {
    Verdict v = f.Get("/user/x", "192.0.2.9");
    ASSERT_TRUE(v.pass());
    EXPECT_TRUE(v.headers.empty());
  }
  // An oversized API key is a 400 with a reason, never a crash.
  FakeHeaders big{{"X-API-Key", std::string(10000, 'k')}};
  Verdict v = f.Get("/key/a", "192.0.2.1", &big);
  EXPECT_EQ(v.status, 400);
  EXPECT_NE(v.body.find("X-API-Key is longer than 128 bytes"), std::string::npos) << v.body;
  EXPECT_EQ(f.mw->Stats().bad_requests, 1u);
}

TEST(Middleware, InventedApiKeysCountAsMissing) {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "p", .key = {KeyPart::kApiKey}}};
  o.api_key_valid = [](std::string_view k) { return k == "real-key"; };
  Fixture f({Policy::FixedWindow("p", 3, minutes(1))}, std::move(o));
  // Rotating made-up keys from one address lands on that address's budget.
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    FakeHeaders h{{"X-API-Key", "fake-" + std::to_string(i)}};
    ok += f.Get("/", "192.0.2.1", &h).pass() ? 1 : 0;
  }
  EXPECT_EQ(ok, 3);
  // A genuine key has its own budget.
  FakeHeaders real{{"X-API-Key", "real-key"}};
  EXPECT_TRUE(f.Get("/", "192.0.2.1", &real).pass());
  EXPECT_EQ(f.limiter->Peek(JoinKey({"key", "real-key"}))->remaining, 2u);
}

TEST(Middleware, KeysAreUnambiguousCombinations) {
  MiddlewareOptions o;
  o.default_limits = {{.policy = "p", .key = {KeyPart::kApiKey, KeyPart::kMethod}}};
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  // ("a:method", GET) and ("a", "method:GET") never meet.
  FakeHeaders a{{"X-API-Key", "a:method:GET"}};
  FakeHeaders b{{"X-API-Key", "a"}};
  EXPECT_TRUE(f.Get("/", "192.0.2.1", &a).pass());
  EXPECT_TRUE(f.Get("/", "192.0.2.1", &b).pass());
  EXPECT_TRUE(f.Get("/", "192.0.2.1", &b, "method:GET").pass());
}

TEST(Middleware, Ipv6FloodInsideOnePrefixLandsOnOneKey) {
  Fixture f({Policy::FixedWindow("p", 10, minutes(1))}, ByIp("p"));
  int allowed = 0;
  char addr[64];
  for (int i = 0; i < 1000; ++i) {
    std::snprintf(addr, sizeof(addr), "2001:db8:1:2:%x:%x:%x:%x", i * 7 % 65536, i, i * 31 % 65536,
                  (i * 131) % 65536);
    allowed += f.Get("/", addr).pass() ? 1 : 0;
  }
  EXPECT_EQ(allowed, 10);
  EXPECT_EQ(f.mw->ClientIp(Request{"GET", "/", "2001:db8:1:2:abcd::1", nullptr}),
            "2001:db8:1:2::/64");
  // The next /64 is another client.
  EXPECT_TRUE(f.Get("/", "2001:db8:1:3::1").pass());
}

TEST(Middleware, Ipv6PrefixIsConfigurableAndMappedIpv4IsIpv4) {
  MiddlewareOptions o = ByIp("p");
  o.client_ip.ipv6_prefix = 48;
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  EXPECT_TRUE(f.Get("/", "2001:db8:1:2::1").pass());
  EXPECT_EQ(f.Get("/", "2001:db8:1:ffff::1").status, 429);
  EXPECT_TRUE(f.Get("/", "192.0.2.1").pass());
  EXPECT_EQ(f.Get("/", "::ffff:192.0.2.1").status, 429);
}

TEST(Middleware, ForwardingHeadersOnlyFromTrustedProxies) {
  MiddlewareOptions o = ByIp("p");
  o.client_ip.trusted_proxies = {"10.0.0.0/8", "::1"};
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  FakeHeaders spoof{{"X-Forwarded-For", "1.2.3.4"}};
  // An untrusted peer's header is ignored: keyed by the peer.
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "203.0.113.1", &spoof}), "203.0.113.1");
  EXPECT_TRUE(f.Get("/", "203.0.113.1", &spoof).pass());
  FakeHeaders spoof2{{"X-Forwarded-For", "5.6.7.8"}};
  EXPECT_EQ(f.Get("/", "203.0.113.1", &spoof2).status, 429);  // rotating the header does not help
  // Through a trusted proxy: the forwarded client.
  FakeHeaders chain{{"X-Forwarded-For", "6.6.6.6, 198.51.100.4, 10.0.0.2"}};
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "10.0.0.1", &chain}), "198.51.100.4");
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "::1", &chain}), "198.51.100.4");
  // Malformed / oversized: the peer.
  FakeHeaders bad{{"X-Forwarded-For", std::string(100000, '[')}};
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "10.0.0.1", &bad}), "10.0.0.1");
  // Many header lines: only the last ones are walked; the proxy's line decides.
  FakeHeaders many;
  for (int i = 0; i < 1000; ++i) many.Add("X-Forwarded-For", "6.6.6." + std::to_string(i % 250));
  many.Add("X-Forwarded-For", "198.51.100.9");
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "10.0.0.1", &many}), "198.51.100.9");
  // More trusted lines than max_hops: the peer.
  FakeHeaders deep;
  for (int i = 0; i < 40; ++i) deep.Add("X-Forwarded-For", "10.0.0." + std::to_string(i + 2));
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "10.0.0.1", &deep}), "10.0.0.1");
}

TEST(Middleware, ForwardedHeaderWhenConfigured) {
  MiddlewareOptions o = ByIp("p");
  o.client_ip.trusted_proxies = {"10.0.0.0/8"};
  o.client_ip.header = ForwardedHeader::kForwarded;
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  FakeHeaders h{{"Forwarded", "for=\"[2001:db8:5:6::1]:443\";proto=https"},
                {"X-Forwarded-For", "1.2.3.4"}};
  EXPECT_EQ(f.mw->ClientIp({"GET", "/", "10.0.0.1", &h}), "2001:db8:5:6::/64");
}

TEST(Middleware, AllowListAndExemptFunction) {
  MiddlewareOptions o = ByIp("p");
  o.allow_list = {"192.0.2.0/24"};
  o.exempt = [](const Request& r) { return r.path == "/metrics"; };
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(f.Get("/", "192.0.2.77").pass());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(f.Get("/metrics", "198.51.100.1").pass());
  EXPECT_TRUE(f.Get("/", "198.51.100.1").pass());
  EXPECT_EQ(f.Get("/", "198.51.100.1").status, 429);
  EXPECT_EQ(f.mw->Stats().exempt, 10u);
}

TEST(Middleware, ShadowModeNeverAnswers429) {
  MiddlewareOptions o = ByIp("p");
  o.shadow = true;
  Fixture f({Policy::FixedWindow("p", 2, minutes(1))}, std::move(o));
  for (int i = 0; i < 5; ++i) {
    Verdict v = f.Get("/", "192.0.2.1");
    ASSERT_TRUE(v.pass());
    EXPECT_FALSE(HeaderOf(v, "RateLimit").empty());
    EXPECT_EQ(HeaderOf(v, "Retry-After"), "");
  }
  EXPECT_EQ(f.mw->Stats().shadow_limited, 3u);
  EXPECT_EQ(f.mw->Stats().limited, 0u);
}

TEST(Middleware, LimiterShadowPolicyPassesThrough) {
  Policy p = Policy::FixedWindow("p", 1, minutes(1));
  p.shadow = true;
  Fixture f({p}, ByIp("p"));
  EXPECT_TRUE(f.Get("/", "192.0.2.1").pass());
  Verdict v = f.Get("/", "192.0.2.1");
  EXPECT_TRUE(v.pass());
  EXPECT_TRUE(v.decision.shadow_denied);
  EXPECT_EQ(f.mw->Stats().shadow_limited, 1u);
}

TEST(Middleware, HeaderFamiliesAreSelectable) {
  MiddlewareOptions o = ByIp("p");
  o.headers.legacy = false;
  o.headers.ratelimit_policy = false;
  o.headers.on_allowed = false;
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  Verdict ok = f.Get("/", "192.0.2.1");
  EXPECT_TRUE(ok.headers.empty());
  Verdict no = f.Get("/", "192.0.2.1");
  EXPECT_EQ(no.status, 429);
  EXPECT_EQ(HeaderOf(no, "RateLimit"), "\"p\";r=0;t=60");
  EXPECT_EQ(HeaderOf(no, "RateLimit-Policy"), "");
  EXPECT_EQ(HeaderOf(no, "X-RateLimit-Limit"), "");
  EXPECT_EQ(HeaderOf(no, "Retry-After"), "60");
}

TEST(Middleware, StoreFailureFailOpenPassesWithoutQuotaHeaders) {
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, ByIp("p"), std::make_shared<FailingStore>());
  for (int i = 0; i < 3; ++i) {
    Verdict v = f.Get("/", "192.0.2.1");
    ASSERT_TRUE(v.pass());
    EXPECT_EQ(v.decision.source, DecisionSource::kFailOpen);
    EXPECT_TRUE(v.headers.empty());
  }
  EXPECT_EQ(f.mw->Stats().fail_open, 3u);
}

TEST(Middleware, StoreFailureFailClosedAnswers503) {
  Policy p = Policy::FixedWindow("p", 10, minutes(1));
  p.failure_mode = FailureMode::kFailClosed;
  Fixture f({p}, ByIp("p"), std::make_shared<FailingStore>(ErrorCode::kDeadlineExceeded));
  Verdict v = f.Get("/", "192.0.2.1");
  EXPECT_EQ(v.status, 503);
  EXPECT_EQ(HeaderOf(v, "Retry-After"), "1");
  EXPECT_NE(v.body.find("temporary-reduced-capacity"), std::string::npos) << v.body;
  EXPECT_EQ(f.mw->Stats().unavailable, 1u);
}

TEST(Middleware, StoreFailureLocalFallbackDecides) {
  Policy p = Policy::FixedWindow("p", 4, minutes(1));
  p.failure_mode = FailureMode::kLocalFallback;
  p.fallback_divisor = 2;
  Fixture f({p}, ByIp("p"), std::make_shared<FailingStore>());
  EXPECT_TRUE(f.Get("/", "192.0.2.1").pass());
  EXPECT_TRUE(f.Get("/", "192.0.2.1").pass());
  Verdict v = f.Get("/", "192.0.2.1");
  EXPECT_EQ(v.status, 429);
  EXPECT_EQ(v.decision.source, DecisionSource::kLocalFallback);
}

TEST(Middleware, CostFromTheApplication) {
  MiddlewareOptions o = ByIp("p");
  o.cost = [](const Request& r) -> std::uint64_t { return r.method == "POST" ? 5 : 1; };
  Fixture f({Policy::FixedWindow("p", 10, minutes(1))}, std::move(o));
  EXPECT_TRUE(f.Get("/", "192.0.2.1", nullptr, "POST").pass());
  EXPECT_TRUE(f.Get("/", "192.0.2.1", nullptr, "POST").pass());
  EXPECT_EQ(f.Get("/", "192.0.2.1").status, 429);
}

TEST(Middleware, CostAboveCapacityIsAConfigurationError) {
  MiddlewareOptions o = ByIp("p");
  o.cost = [](const Request&) -> std::uint64_t { return 100; };
  Fixture f({Policy::FixedWindow("p", 10, minutes(1))}, std::move(o));
  Verdict v = f.Get("/", "192.0.2.1");
  EXPECT_EQ(v.status, 500);
  EXPECT_NE(v.body.find("exceeds the capacity"), std::string::npos) << v.body;
}

TEST(Middleware, BadPeerAddressIsAnIntegrationError) {
  Fixture f({Policy::FixedWindow("p", 10, minutes(1))}, ByIp("p"));
  Verdict v = f.Get("/", "not-an-ip");
  EXPECT_EQ(v.status, 500);
  EXPECT_NE(v.body.find("not-an-ip"), std::string::npos);
}

TEST(Middleware, ConfigurationErrorsNameTheField) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto limiter = MakeLimiter(
      {Policy::FixedWindow("a", 1, minutes(1)), Policy::FixedWindow("b", 1, minutes(1))}, clock);
  auto expect_error = [&](MiddlewareOptions o, std::string_view needle) {
    o.limiter = limiter;
    auto r = Middleware::Create(std::move(o));
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  MiddlewareOptions o;
  o.routes = {{.path = "/x", .limits = {{.policy = "a"}}},
              {.path = "/y", .limits = {{.policy = "zzz"}}}};
  expect_error(o, "routes[1].limits[0]: no policy named 'zzz'");
  o.routes = {
      {.path = "/x", .limits = {{.policy = "a"}, {.policy = "a", .key = {KeyPart::kApiKey}}}}};
  expect_error(o, "policy 'a' is used twice");
  o.routes = {{.path = "/x", .limits = {{.policy = "a", .key = {KeyPart::kUser}}}}};
  expect_error(o, "no user function");
  o.routes = {};
  o.client_ip.trusted_proxies = {"10.0.0.0/99"};
  expect_error(o, "client_ip.trusted_proxies[0]");
  o.client_ip = {};
  o.client_ip.ipv6_prefix = 0;
  expect_error(o, "ipv6_prefix");
  o.client_ip = {};
  o.allow_list = {"nope"};
  expect_error(o, "allow_list[0]");
  MiddlewareOptions none;
  auto r = Middleware::Create(std::move(none));
  EXPECT_FALSE(r.ok());
}

TEST(Middleware, NoRouteAndNoDefaultLimitsPasses) {
  MiddlewareOptions o;
  o.routes = {{.path = "/only", .limits = {{.policy = "p"}}}};
  Fixture f({Policy::FixedWindow("p", 1, minutes(1))}, std::move(o));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(f.Get("/other", "192.0.2.1").pass());
}

// --- concurrency limits and waiting instead of rejecting (issue #12) ---------------

std::vector<Policy> ConcurrencyPolicies() {
  return {Policy::Concurrency("inflight", 1, seconds(30)),
          Policy::FixedWindow("api", 100, minutes(1))};
}

MiddlewareOptions SlowRoute() {
  MiddlewareOptions o;
  o.routes = {{.path = "/slow", .limits = {{.policy = "inflight"}, {.policy = "api"}}}};
  o.default_limits = {{.policy = "api"}};
  return o;
}

TEST(Middleware, ConcurrencyRouteHoldsAPermitWhileTheVerdictLives) {
  Fixture f(ConcurrencyPolicies(), SlowRoute());
  const std::string key = JoinKey({"ip", "192.0.2.1"});
  {
    Verdict first = f.Get("/slow", "192.0.2.1");
    ASSERT_TRUE(first.pass());
    EXPECT_TRUE(first.permit.held());
    EXPECT_EQ(HeaderOf(first, "RateLimit-Policy"),
              "\"inflight\";q=1;qu=\"concurrent-requests\", \"api\";q=100;w=60");
    // The handler is running: a second request of the client is refused, and nothing of
    // its rate limit is taken.
    f.clock->Advance(10 * kSec);
    Verdict second = f.Get("/slow", "192.0.2.1");
    ASSERT_EQ(second.status, 429);
    EXPECT_FALSE(second.permit.held());
    // Retry-After: until the held permit's lease ends (30 s after it was taken).
    EXPECT_EQ(HeaderOf(second, "Retry-After"), "20");
    EXPECT_NE(second.body.find("\"violated-policies\":[\"inflight\"]"), std::string::npos)
        << second.body;
    EXPECT_EQ(HeaderOf(second, "RateLimit"), "\"inflight\";r=0;t=20, \"api\";r=99;t=50");
    // Other routes and clients are not held back.
    EXPECT_TRUE(f.Get("/fast", "192.0.2.1").pass());
    EXPECT_TRUE(f.Get("/slow", "192.0.2.2").pass());
  }  // the first Verdict (the response sent) releases the permit
  Verdict third = f.Get("/slow", "192.0.2.1");
  EXPECT_TRUE(third.pass());
  EXPECT_EQ(f.mw->Stats().limited, 1u);
}

TEST(Middleware, APermitNeverReleasedExpiresAfterItsLease) {
  Fixture f(ConcurrencyPolicies(), SlowRoute());
  Verdict held = f.Get("/slow", "192.0.2.1");
  ASSERT_TRUE(held.pass());
  std::string id = held.permit.Detach();  // a crashed handler: nobody releases it
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(f.Get("/slow", "192.0.2.1").status, 429);
  f.clock->Advance(30 * kSec);
  EXPECT_TRUE(f.Get("/slow", "192.0.2.1").pass());
}

TEST(Middleware, ConcurrencyFailClosedIs503) {
  std::vector<Policy> p = ConcurrencyPolicies();
  p[0].failure_mode = FailureMode::kFailClosed;
  Fixture f(std::move(p), SlowRoute(), std::make_shared<FailingStore>());
  Verdict v = f.Get("/slow", "192.0.2.1");
  EXPECT_EQ(v.status, 503);
  EXPECT_FALSE(v.permit.held());
  EXPECT_FALSE(HeaderOf(v, "Retry-After").empty());
}

TEST(Middleware, MaxDelayWaitsInsteadOfRejecting) {
  // 1 request per second, no burst beyond 1; wait up to 2.5 s.
  MiddlewareOptions o;
  o.routes = {{.path = "/api/*", .limits = {{.policy = "rate"}}, .max_delay = 2'500'000}};
  auto clock = std::make_shared<ManualClock>(kNoon);
  // Simulated time: "sleeping" advances the manual clock.
  auto sleeper = std::make_shared<ManualSleeper>(clock, /*auto_advance=*/true);
  o.sleeper = sleeper;
  o.limiter = MakeLimiter({Policy::Gcra("rate", 2, seconds(4), 3)}, clock);
  auto mw = Middleware::Create(std::move(o));
  ASSERT_TRUE(mw.ok()) << mw.status().ToString();
  auto get = [&] { return (*mw)->Check(Request{"GET", "/api/x", "192.0.2.1", nullptr}); };
  // GCRA 1 per 2 s with a burst of 3: three pass at once, the next ones are delayed.
  for (int i = 0; i < 3; ++i) {
    Verdict v = get();
    ASSERT_TRUE(v.pass()) << i;
    EXPECT_EQ(v.delay, 0) << i;
    EXPECT_EQ(HeaderOf(v, "Server-Timing"), "") << i;
  }
  Verdict b = get();
  ASSERT_TRUE(b.pass());
  EXPECT_GT(b.delay, 0);
  EXPECT_LE(b.delay, 2'500'000);
  EXPECT_EQ(HeaderOf(b, "Server-Timing"),
            "ratelimit-delay;dur=" + std::to_string((b.delay + 999) / 1000));
  // Whatever cannot pass within 2.5 s is a 429, taking nothing.
  int denied = 0;
  for (int i = 0; i < 5; ++i) {
    Verdict v = get();
    if (!v.pass()) {
      ++denied;
      EXPECT_EQ(v.status, 429);
      EXPECT_GE(std::stol(HeaderOf(v, "Retry-After")), 1);
      EXPECT_EQ(v.delay, 0);
    } else {
      EXPECT_LE(v.delay, 2'500'000);
    }
  }
  EXPECT_GT(denied, 0);
  // The adapter waits through the injected sleeper: simulated time only.
  const Micros before = clock->Now();
  (*mw)->Wait(b);
  EXPECT_EQ(clock->Now() - before, b.delay);
  EXPECT_EQ(sleeper->slept(), std::vector<Micros>{b.delay});
  const MiddlewareStats st = (*mw)->Stats();
  EXPECT_EQ(st.delayed, st.allowed - 3);
  EXPECT_EQ(st.limited, static_cast<std::uint64_t>(denied));
}

TEST(Middleware, MaxDelayDefaultsAndErrors) {
  auto expect_error = [](MiddlewareOptions o, const std::string& what) {
    o.limiter = MakeLimiter(ConcurrencyPolicies(), std::make_shared<ManualClock>(kNoon));
    auto r = Middleware::Create(std::move(o));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  MiddlewareOptions o = SlowRoute();
  o.routes[0].max_delay = 1'000'000;
  expect_error(o, "routes[0].max_delay: the route has a concurrency limit");
  o = SlowRoute();
  o.max_delay = -1;
  expect_error(o, "max_delay must not be negative");
  o = SlowRoute();
  o.routes.push_back({.path = "/api", .limits = {{.policy = "api"}}, .max_delay = 61'000'000});
  expect_error(o, "routes[1].max_delay 61000000us exceeds the window 60000000us of policy 'api'");
  // The middleware-wide max_delay skips routes with a concurrency limit.
  o = SlowRoute();
  o.max_delay = 1'000'000;
  o.limiter = MakeLimiter(ConcurrencyPolicies(), std::make_shared<ManualClock>(kNoon));
  EXPECT_TRUE(Middleware::Create(std::move(o)).ok());
}

}  // namespace
}  // namespace sluice::http
