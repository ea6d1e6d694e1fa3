// sluiced and the HTTP middleware answer the same rate-limit header fields for the same
// limit and the same traffic (issue #17 bug 2: one formatter, src/http/headers.cc), for
// every algorithm: RateLimit-Policy, RateLimit, X-RateLimit-* and Retry-After.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "http/http_test_util.h"
#include "service/engine.h"
#include "sluice/memory_store.h"

namespace sluice::service {
namespace {

using std::chrono::minutes;

constexpr Micros kSec = 1'000'000;
constexpr Micros kNoon = 1785412800LL * kSec;

struct Case {
  const char* algorithm;
  Policy policy;     // the middleware's
  std::string yaml;  // sluiced's rate_limit block for the same limit
};

std::vector<Case> Cases() {
  return {
      {"fixed_window", Policy::FixedWindow("api", 5, minutes(1)),
       "{unit: minute, requests_per_unit: 5, name: api, algorithm: fixed_window}"},
      {"sliding_window_log", Policy::SlidingWindowLog("api", 5, minutes(1)),
       "{unit: minute, requests_per_unit: 5, name: api, algorithm: sliding_window_log}"},
      {"sliding_window_counter", Policy::SlidingWindowCounter("api", 5, minutes(1)),
       "{unit: minute, requests_per_unit: 5, name: api, algorithm: sliding_window_counter}"},
      {"token_bucket", Policy::TokenBucket("api", 4, 100, minutes(1)),
       "{unit: minute, requests_per_unit: 100, burst: 4, name: api, algorithm: token_bucket}"},
      {"gcra", Policy::Gcra("api", 100, minutes(1), 4),
       "{unit: minute, requests_per_unit: 100, burst: 4, name: api, algorithm: gcra}"},
      {"concurrency", Policy::Concurrency("api", 3, minutes(1)),
       "{concurrency: 3, lease: 60s, name: api}"},
  };
}

// Header fields by lower-case name.
using Fields = std::map<std::string, std::string>;

Fields Lower(const std::vector<std::pair<std::string_view, std::string>>& h) {
  Fields out;
  for (const auto& [k, v] : h) {
    std::string n(k);
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[n] = v;
  }
  return out;
}

class Sluiced {
 public:
  Sluiced(const Case& c, const std::string& mode, std::shared_ptr<ManualClock> clock) {
    const std::string yaml =
        "sluiced: {response_headers: " + mode +
        "}\n---\ndomain: web\ndescriptors:\n  - key: ip\n    rate_limit: " + c.yaml + "\n";
    auto config = ParseConfig(yaml, "agree.yaml");
    EXPECT_TRUE(config.ok()) << config.status().message();
    auto e = Engine::Create(*config, Engine::Options{std::make_shared<MemoryStore>(), clock});
    EXPECT_TRUE(e.ok()) << e.status().message();
    engine = std::move(*e);
    concurrency = c.policy.algorithm == Algorithm::kConcurrency;
  }
  Fields Ask() {
    RateLimitRequest req;
    req.domain = "web";
    DescriptorRequest d;
    d.entries.push_back(Entry{"ip", "192.0.2.1"});
    req.descriptors.push_back(d);
    Fields out;
    bool called = false;
    auto take = [&](const Status& s, const RateLimitResponse& r) {
      EXPECT_TRUE(s.ok()) << s.message();
      for (const auto& [k, v] : r.response_headers) out[k] = v;
      called = true;
    };
    if (concurrency) {
      engine->AcquireAsync(req, [&](const Status& s, PermitResponse& r) { take(s, r.rate); });
    } else {
      engine->ShouldRateLimitAsync(req, [&](const Status& s, RateLimitResponse& r) { take(s, r); });
    }
    EXPECT_TRUE(called);  // the embedded store answers inline
    return out;
  }
  std::unique_ptr<Engine> engine;
  bool concurrency = false;
};

TEST(HeadersAgree, SluicedAndTheMiddlewareFormatEveryAlgorithmAlike) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.algorithm);
    auto clock = std::make_shared<ManualClock>(kNoon + 250'000);
    auto limiter = http::testing::MakeLimiter({c.policy}, clock);
    http::MiddlewareOptions o;
    o.limiter = limiter;
    o.default_limits = {{.policy = "api"}};
    auto mw = http::Middleware::Create(std::move(o));
    ASSERT_TRUE(mw.ok()) << mw.status().ToString();
    Sluiced draft10(c, "draft10", clock), legacy(c, "x_ratelimit", clock);
    std::vector<http::Verdict> held;  // concurrency: permits stay held
    for (int i = 0; i < 7; ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      http::Request r{"GET", "/", "192.0.2.1", nullptr};
      held.push_back((*mw)->Check(r));
      const Fields m = Lower(held.back().headers);
      const Fields d = draft10.Ask();
      const Fields x = legacy.Ask();
      EXPECT_EQ(d.at("ratelimit-policy"), m.at("ratelimit-policy"));
      EXPECT_EQ(d.at("ratelimit"), m.at("ratelimit"));
      EXPECT_EQ(x.at("x-ratelimit-limit"), m.at("x-ratelimit-limit"));
      EXPECT_EQ(x.at("x-ratelimit-remaining"), m.at("x-ratelimit-remaining"));
      EXPECT_EQ(x.at("x-ratelimit-reset"), m.at("x-ratelimit-reset"));
      const std::string retry = m.count("retry-after") ? m.at("retry-after") : "";
      EXPECT_EQ(d.count("retry-after") ? d.at("retry-after") : "", retry);
      EXPECT_EQ(x.count("retry-after") ? x.at("retry-after") : "", retry);
      clock->Advance(1'300'000);
    }
  }
}

}  // namespace
}  // namespace sluice::service
