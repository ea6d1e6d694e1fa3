// The decision engine in process, on a manual clock: descriptor matching as in
// envoyproxy/ratelimit, per-descriptor statuses, costs, atomic multi-descriptor decisions,
// replaces/unlimited/shadow, overrides, and state kept across reloads.
#include "service/engine.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <thread>

#include "sluice/memory_store.h"
#include "sluice/permit.h"

namespace sluice::service {
namespace {

constexpr Micros kSec = 1'000'000;
// 2026-07-30 12:00:00 UTC: on a day boundary? No, noon; on an hour boundary.
constexpr Micros kNoon = 1785412800LL * kSec;

// One request descriptor: entries and an optional per-descriptor hits_addend.
struct D {
  D() = default;
  D(std::vector<std::pair<std::string, std::string>> e,  // NOLINT: brace-initialised
    std::optional<std::uint64_t> h = std::nullopt)
      : entries(std::move(e)), hits(h) {}
  std::vector<std::pair<std::string, std::string>> entries;
  std::optional<std::uint64_t> hits;
};

class EngineTest : public ::testing::Test {
 protected:
  void Load(const std::string& yaml) {
    auto c = ParseConfig(yaml, "engine.yaml");
    ASSERT_TRUE(c.ok()) << c.status().message();
    auto e = Engine::Create(*c, Engine::Options{store, clock});
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine = std::move(*e);
  }
  Status Reload(const std::string& yaml) {
    auto c = ParseConfig(yaml, "engine.yaml");
    if (!c.ok()) return c.status();
    return engine->Reload(*c);
  }
  // Decides descriptors `ds` in `domain`; ASSERTs success.
  RateLimitResponse Ask(const std::string& domain, const std::vector<D>& ds,
                        std::uint32_t hits = 0) {
    RateLimitResponse r;
    Status s = Try(domain, ds, hits, &r);
    EXPECT_TRUE(s.ok()) << s.message();
    return r;
  }
  Status Try(const std::string& domain, const std::vector<D>& ds, std::uint32_t hits,
             RateLimitResponse* out) {
    RateLimitRequest req;
    req.domain = domain;
    req.hits_addend = hits;
    for (const D& d : ds) {
      DescriptorRequest dr;
      for (const auto& [k, v] : d.entries) dr.entries.push_back(Entry{k, v});
      if (d.hits) {
        dr.has_hits_addend = true;
        dr.hits_addend = *d.hits;
      }
      req.descriptors.push_back(std::move(dr));
    }
    return engine->ShouldRateLimit(req, out);
  }
  // How many of `n` single-descriptor requests pass.
  int Passes(const std::string& domain, const D& d, int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) ok += Ask(domain, {d}).overall_code == Code::kOk;
    return ok;
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::unique_ptr<Engine> engine;
};

const char* kMatching = R"(
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4, name: login_per_user}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: second, requests_per_unit: 5}
)";

TEST_F(EngineTest, KeyOnlyMatchCountsEachValueSeparately) {
  Load(kMatching);
  EXPECT_EQ(Passes("web", {{{"remote_address", "1.1.1.1"}}}, 5), 3);
  EXPECT_EQ(Passes("web", {{{"remote_address", "2.2.2.2"}}}, 5), 3);
}

TEST_F(EngineTest, ExactValueWinsOverKeyOnly) {
  Load(kMatching);
  auto r = Ask("web", {{{{"remote_address", "10.0.0.1"}}}});
  ASSERT_EQ(r.statuses.size(), 1u);
  EXPECT_EQ(r.statuses[0].requests_per_unit, 1u);
  EXPECT_EQ(Passes("web", {{{"remote_address", "10.0.0.1"}}}, 3), 0);
}

TEST_F(EngineTest, WildcardValuePrefix) {
  Load(kMatching);
  EXPECT_EQ(Passes("web", {{{"path", "/api/v1/items"}}}, 4), 2);
  // Each matching value is its own counter, like a key-only match.
  EXPECT_EQ(Passes("web", {{{"path", "/api/v2"}}}, 4), 2);
  auto r = Ask("web", {{{{"path", "/other"}}}});
  EXPECT_FALSE(r.statuses[0].has_limit);
}

TEST_F(EngineTest, NestedDescriptorsNeedTheWholeChain) {
  Load(kMatching);
  auto r = Ask("web", {{{{"path", "/login"}, {"user", "ann"}}}});
  ASSERT_TRUE(r.statuses[0].has_limit);
  EXPECT_EQ(r.statuses[0].unit, Unit::kHour);
  EXPECT_EQ(r.statuses[0].name, "login_per_user");
  EXPECT_EQ(r.statuses[0].limit_remaining, 3u);
  // The parent alone has no rate_limit; a longer chain than configured matches nothing;
  // an unknown middle entry matches nothing.
  EXPECT_FALSE(Ask("web", {{{{"path", "/login"}}}}).statuses[0].has_limit);
  EXPECT_FALSE(
      Ask("web", {{{{"path", "/login"}, {"user", "ann"}, {"x", "y"}}}}).statuses[0].has_limit);
  EXPECT_FALSE(Ask("web", {{{{"tenant", "t1"}, {"plan", "paid"}}}}).statuses[0].has_limit);
  EXPECT_TRUE(Ask("web", {{{{"tenant", "t1"}, {"plan", "free"}}}}).statuses[0].has_limit);
  // A leaf with a rate limit does not match when more entries follow.
  EXPECT_FALSE(
      Ask("web", {{{{"remote_address", "1.1.1.1"}, {"path", "/x"}}}}).statuses[0].has_limit);
}

TEST_F(EngineTest, PerDescriptorStatusesAndOverallCode) {
  Load(kMatching);
  // 10.0.0.1 has a limit of 1; the second request is over it while path /api still passes.
  Ask("web", {{{{"remote_address", "10.0.0.1"}}}});
  auto r = Ask("web",
               {{{{"path", "/api/x"}}}, {{{"remote_address", "10.0.0.1"}}}, {{{"unknown", "k"}}}});
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  ASSERT_EQ(r.statuses.size(), 3u);
  EXPECT_EQ(r.statuses[0].code, Code::kOk);
  EXPECT_EQ(r.statuses[0].requests_per_unit, 2u);
  EXPECT_EQ(r.statuses[1].code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[1].limit_remaining, 0u);
  EXPECT_GT(r.statuses[1].retry_after, 0);
  EXPECT_EQ(r.statuses[2].code, Code::kOk);
  EXPECT_FALSE(r.statuses[2].has_limit);
  // All or nothing: the denied request did not consume the /api/x budget.
  EXPECT_EQ(Passes("web", {{{"path", "/api/x"}}}, 3), 2);
  // Headers describe the binding (denying) limit.
  bool retry = false;
  for (const auto& [k, v] : r.response_headers) retry = retry || k == "retry-after";
  EXPECT_TRUE(retry);
}

TEST_F(EngineTest, HitsAddendRequestAndPerDescriptor) {
  Load(kMatching);
  auto r = Ask("web", {{{{"remote_address", "3.3.3.3"}}}}, /*hits=*/2);
  EXPECT_EQ(r.statuses[0].limit_remaining, 1u);
  r = Ask("web", {{{{"remote_address", "3.3.3.3"}}, /*hits=*/1}}, /*hits=*/3);
  EXPECT_EQ(r.overall_code, Code::kOk);
  EXPECT_EQ(r.statuses[0].limit_remaining, 0u);
  // A cost larger than the limit is over limit, and consumes nothing anywhere.
  r = Ask("web", {{{{"remote_address", "4.4.4.4"}}}}, /*hits=*/50);
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_EQ(Passes("web", {{{"remote_address", "4.4.4.4"}}}, 4), 3);
  // hits_addend 0 on a descriptor only looks.
  r = Ask("web", {{{{"remote_address", "5.5.5.5"}}, 0}});
  EXPECT_EQ(r.statuses[0].limit_remaining, 3u);
}

TEST_F(EngineTest, UnknownDomainLimitsNothing) {
  Load(kMatching);
  for (int i = 0; i < 10; ++i) {
    auto r = Ask("nope", {{{{"remote_address", "1.1.1.1"}}}});
    EXPECT_EQ(r.overall_code, Code::kOk);
    EXPECT_FALSE(r.statuses[0].has_limit);
  }
  EXPECT_NE(engine->RenderMetrics().find("sluiced_unknown_domain_total 10"), std::string::npos);
}

TEST_F(EngineTest, BadRequestsAreInvalidArgument) {
  Load(kMatching);
  RateLimitResponse r;
  Status s = Try("web", {}, 0, &r);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "descriptors must not be empty");
  // A descriptor with no entries limits nothing: OK, as Envoy expects.
  s = Try("web", {D{}}, 0, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.overall_code, Code::kOk);
  ASSERT_EQ(r.statuses.size(), 1u);
  EXPECT_FALSE(r.statuses[0].has_limit);
  s = Try("", {{{{"a", "b"}}}}, 0, &r);
  EXPECT_EQ(s.message(), "domain must not be empty");
  s = Try("web", std::vector<D>(17, D{{{"a", "b"}}}), 0, &r);
  EXPECT_EQ(s.message(), "too many descriptors: 17 (at most 16)");
  s = Try("web", {{{{"", "b"}}}}, 0, &r);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
}

TEST_F(EngineTest, WindowPassesOnTheManualClock) {
  Load(kMatching);
  EXPECT_EQ(Passes("web", {{{"remote_address", "6.6.6.6"}}}, 5), 3);
  clock->Advance(60 * kSec);
  EXPECT_EQ(Passes("web", {{{"remote_address", "6.6.6.6"}}}, 5), 3);
}

TEST_F(EngineTest, ReplacesUnlimitedAndShadow) {
  Load(R"(
domain: d
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1, name: per_key}
  - key: plan
    value: partner
    rate_limit:
      name: partner
      replaces: [{name: per_key}]
      unit: minute
      requests_per_unit: 3
  - key: health
    rate_limit: {unlimited: true}
  - key: user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)");
  // With the partner descriptor, per_key no longer applies.
  int ok = 0;
  for (int i = 0; i < 5; ++i) {
    auto r = Ask("d", {{{{"api_key", "k1"}}}, {{{"plan", "partner"}}}});
    ok += r.overall_code == Code::kOk;
    EXPECT_FALSE(r.statuses[0].has_limit);
  }
  EXPECT_EQ(ok, 3);
  // Alone, per_key does.
  EXPECT_EQ(Passes("d", {{{"api_key", "k2"}}}, 3), 1);
  // Unlimited: OK, no limit, remaining max.
  auto u = Ask("d", {{{{"health", "x"}}}});
  EXPECT_EQ(u.statuses[0].limit_remaining, 0xffffffffu);
  EXPECT_FALSE(u.statuses[0].has_limit);
  // Shadow: always OK, the would-be denials are counted.
  EXPECT_EQ(Passes("d", {{{"user", "bob"}}}, 4), 4);
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("sluiced_shadow_over_limit_total{domain=\"d\",descriptor=\"user\"} 3"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("sluiced_decisions_total{domain=\"d\",descriptor=\"health\",outcome="
                   "\"unlimited\"} 1"),
            std::string::npos);
  // A shadow limit that would deny does not stop an enforced one from consuming.
  auto r = Ask("d", {{{{"user", "bob"}}}, {{{"api_key", "k3"}}}});
  EXPECT_EQ(r.overall_code, Code::kOk);
  EXPECT_EQ(Ask("d", {{{{"api_key", "k3"}}}}).overall_code, Code::kOverLimit);
}

TEST_F(EngineTest, ReloadKeepsStateOfUnchangedLimits) {
  const std::string v1 = R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3}
)";
  Load(v1);
  EXPECT_EQ(Passes("d", {{{"a", "x"}}}, 2), 2);
  EXPECT_EQ(Passes("d", {{{"b", "x"}}}, 3), 3);
  // b's limit changes, a's does not.
  ASSERT_TRUE(Reload(R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 1}
)")
                  .ok());
  EXPECT_EQ(Passes("d", {{{"a", "x"}}}, 3), 1) << "a's budget must not be refilled by a reload";
  EXPECT_EQ(Passes("d", {{{"b", "x"}}}, 6), 5) << "b is a new limit";
  EXPECT_EQ(Passes("d", {{{"c", "x"}}}, 2), 1);
  EXPECT_EQ(engine->Stats().generation, 2u);
}

// Carry-over (issue #12 item 4): with `on_change: proportional` a changed limit keeps
// the key's state and its used fraction (5 of 10 used is 10 of 20 used), named policy
// or not; without it an unnamed limit starts afresh, as before.
TEST_F(EngineTest, ReloadWithOnChangeProportionalKeepsTheUsedFraction) {
  const auto config = [](int limit) {
    const std::string n = std::to_string(limit);
    return "domain: d\ndescriptors:\n"
           "  - key: a\n"
           "    rate_limit: {unit: hour, requests_per_unit: " +
           n +
           ", on_change: proportional}\n"
           "  - key: b\n"
           "    rate_limit: {unit: hour, requests_per_unit: " +
           n +
           ", policy: api, on_change: proportional, algorithm: token_bucket}\n"
           "  - key: c\n"
           "    rate_limit: {unit: hour, requests_per_unit: " +
           n + "}\n";
  };
  Load(config(10));
  EXPECT_EQ(Passes("d", {{{"a", "x"}}}, 5), 5);
  EXPECT_EQ(Passes("d", {{{"b", "x"}}}, 5), 5);
  EXPECT_EQ(Passes("d", {{{"c", "x"}}}, 5), 5);
  ASSERT_TRUE(Reload(config(20)).ok());
  EXPECT_EQ(Passes("d", {{{"a", "x"}}}, 30), 10) << "5 of 10 used must be 10 of 20 used";
  EXPECT_EQ(Passes("d", {{{"b", "x"}}}, 30), 10) << "5 of 10 tokens must be 10 of 20";
  EXPECT_EQ(Passes("d", {{{"c", "x"}}}, 30), 20) << "without on_change: a new limit";
  // And back down: 20 of 20 used is 10 of 10 used.
  ASSERT_TRUE(Reload(config(10)).ok());
  EXPECT_EQ(Passes("d", {{{"a", "x"}}}, 5), 0);
}

TEST_F(EngineTest, LimitOverride) {
  Load(kMatching);
  RateLimitRequest req;
  req.domain = "web";
  req.descriptors.resize(1);
  req.descriptors[0].entries.push_back(Entry{"anything", "v"});
  req.descriptors[0].has_override = true;
  req.descriptors[0].override_requests_per_unit = 2;
  req.descriptors[0].override_unit = 3;  // HOUR
  int ok = 0;
  for (int i = 0; i < 4; ++i) {
    RateLimitResponse r;
    ASSERT_TRUE(engine->ShouldRateLimit(req, &r).ok());
    ok += r.overall_code == Code::kOk;
    EXPECT_EQ(r.statuses[0].unit, Unit::kHour);
  }
  EXPECT_EQ(ok, 2);
  req.descriptors[0].override_unit = 9;
  RateLimitResponse r;
  EXPECT_EQ(engine->ShouldRateLimit(req, &r).code(), ErrorCode::kInvalidArgument);
}

TEST_F(EngineTest, ManyDescriptorsAreDecidedTogether) {
  Load(R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: j
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}
)");
  std::vector<D> ds;
  for (int i = 0; i < 8; ++i) ds.push_back(D{{{"k", std::to_string(i)}}});
  for (int i = 0; i < 8; ++i) ds.push_back(D{{{"j", std::to_string(i)}}});
  EXPECT_EQ(Ask("d", ds).overall_code, Code::kOk);
  auto r = Ask("d", ds);
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.statuses[i].code, Code::kOk);
  for (int i = 8; i < 16; ++i) EXPECT_EQ(r.statuses[i].code, Code::kOverLimit);
  // Nothing was consumed by the denied request: each k still has one left.
  EXPECT_EQ(Passes("d", {{{"k", "0"}}}, 2), 1);
  // The same descriptor twice in one request costs twice.
  EXPECT_EQ(Ask("d", {{{{"k", "9"}}}, {{{"k", "9"}}}}).overall_code, Code::kOk);
  EXPECT_EQ(Passes("d", {{{"k", "9"}}}, 1), 0);
}

TEST_F(EngineTest, EqualLimitsWithDifferentFailureModesInOneRequest) {
  Load(R"(
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 2, failure_mode: fail_closed}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 2, failure_mode: local_fallback,
                 fallback_divisor: 2}
)");
  for (int i = 0; i < 2; ++i) {
    auto r = Ask("d", {{{{"a", "x"}}}, {{{"b", "x"}}}, {{{"c", "x"}}}});
    EXPECT_EQ(r.overall_code, Code::kOk);
  }
  EXPECT_EQ(Ask("d", {{{{"a", "x"}}}, {{{"b", "x"}}}}).overall_code, Code::kOverLimit);
}

TEST_F(EngineTest, ConcurrentDecisionsAcrossReloadsNeverExceedTheLimit) {
  const std::string config = R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 50}
)";
  Load(config);
  std::atomic<int> allowed{0};
  std::atomic<bool> done{false};
  std::thread reloader([&] {
    // The same limits again and again: each reload swaps in a new snapshot, and the
    // budget must carry over every time. At least one reload, however fast the
    // workers are (they used to finish first on a loaded machine).
    do {
      ASSERT_TRUE(Reload(config).ok());
    } while (!done.load());
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 40; ++i) {
        RateLimitResponse r;
        RateLimitRequest req;
        req.domain = "d";
        req.descriptors.resize(1);
        req.descriptors[0].entries.push_back(Entry{"k", "shared"});
        ASSERT_TRUE(engine->ShouldRateLimit(req, &r).ok());
        allowed.fetch_add(r.overall_code == Code::kOk);
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  reloader.join();
  EXPECT_EQ(allowed.load(), 50);
  EXPECT_GT(engine->Stats().generation, 1u);
}

TEST_F(EngineTest, LongValuesAreHashedIntoTheKey) {
  Load(R"(
domain: d
descriptors:
  - key: token
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  const std::string a(1000, 'a');
  std::string b = a;
  b.back() = 'b';
  EXPECT_EQ(Passes("d", {{{"token", a}}}, 2), 1);
  EXPECT_EQ(Passes("d", {{{"token", b}}}, 2), 1) << "distinct long values keep distinct counters";
}

TEST_F(EngineTest, GlobalShadowModeNeverDeniesButCounts) {
  Load(R"(
sluiced: {shadow_mode: true}
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  EXPECT_EQ(Passes("d", {{{"k", "x"}}}, 5), 5);
  EXPECT_NE(engine->RenderMetrics().find(
                "sluiced_shadow_over_limit_total{domain=\"d\",descriptor=\"k\"} 4"),
            std::string::npos);
}

TEST_F(EngineTest, DetailedMetricLabelsCarryTheValues) {
  Load(R"(
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  Passes("d", {{{"user", "ann"}}}, 2);
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("sluiced_decisions_total{domain=\"d\",descriptor=\"user|user=ann\","
                   "outcome=\"over_limit\"} 1"),
            std::string::npos)
      << m;
}

// True when `s` is valid UTF-8 (RFC 3629), checked independently of the code under test.
bool ValidUtf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 2) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Defect 5: a client-chosen value with invalid UTF-8 under detailed_metric reached
// /metrics as it was, and Prometheus rejects every scrape after that.
TEST_F(EngineTest, InvalidUtf8ValuesNeverReachMetricsAsInvalidUtf8) {
  Load(R"(
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  for (const std::string& v :
       {std::string("\xff\xfe"), std::string("a\xc3("), std::string("\xed\xa0\x80"),
        std::string("\xf0\x9f\x98"), std::string("caf\xc3\xa9")}) {
    Passes("d", {{{"user", v}}}, 1);
  }
  const std::string m = engine->RenderMetrics();
  EXPECT_TRUE(ValidUtf8(m));
  // Valid UTF-8 is kept as it is; each invalid byte becomes U+FFFD.
  EXPECT_NE(m.find("descriptor=\"user|user=caf\xc3\xa9\""), std::string::npos) << m;
  EXPECT_NE(m.find("descriptor=\"user|user=\xef\xbf\xbd\xef\xbf\xbd\""), std::string::npos) << m;
}

TEST_F(EngineTest, MetricsByDomainDescriptorOutcomeAndNearLimit) {
  Load(kMatching);
  Passes("web", {{{"remote_address", "7.7.7.7"}}}, 4);
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("sluiced_decisions_total{domain=\"web\",descriptor=\"remote_address\","
                   "outcome=\"ok\"} 3"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("sluiced_decisions_total{domain=\"web\",descriptor=\"remote_address\","
                   "outcome=\"over_limit\"} 1"),
            std::string::npos);
  // 3 per minute, ratio 0.8: used 3 > floor(2.4) = 2 only on the third request.
  EXPECT_NE(m.find("sluiced_near_limit_total{domain=\"web\",descriptor=\"remote_address\"} 1"),
            std::string::npos);
  EXPECT_NE(m.find("sluiced_limiter_decisions_total 4"), std::string::npos);
  EXPECT_NE(m.find("sluiced_store_latency_seconds_count 4"), std::string::npos);
}

// A MemoryStore that says it is remote, so the engine turns its deny cache on (as with
// Redis), and that can be switched off to play a Redis outage.
class RemoteLikeStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (down) return Status::Unavailable("store is down (test)");
    return inner.Run(batch, out);
  }
  Status Reset(const Policy& p, std::string_view key) override { return inner.Reset(p, key); }
  bool IsRemote() const override { return true; }
  std::atomic<bool> down{false};
  MemoryStore inner;
};

// Bytes the allocator has handed out and not taken back (heap and mmap'ed blocks).
std::size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Defect 6: each distinct caller override used to build its own Limiter with its own
// 4096-entry deny cache and fallback store (~600 KB each; 4096 overrides reached
// 3.2 GB), and more than 1024 distinct overrides were refused. Memory must not depend
// on how many distinct overrides clients send.
TEST_F(EngineTest, DistinctOverridesCostNoMemory) {
  auto remote = std::make_shared<RemoteLikeStore>();
  auto c = ParseConfig(kMatching, "engine.yaml");
  ASSERT_TRUE(c.ok());
  auto e = Engine::Create(*c, Engine::Options{remote, clock});
  ASSERT_TRUE(e.ok());
  engine = std::move(*e);
  auto ask = [&](std::uint32_t rpu) {
    RateLimitRequest req;
    req.domain = "web";
    DescriptorRequest d;
    d.entries.push_back(Entry{"remote_address", "1.2.3.4"});
    d.has_override = true;
    d.override_requests_per_unit = rpu;
    d.override_unit = 2;  // MINUTE
    req.descriptors.push_back(d);
    RateLimitResponse r;
    return engine->ShouldRateLimit(req, &r);
  };
  // Warm up: the first requests size the thread's scratch buffers.
  for (std::uint32_t i = 1; i <= 16; ++i) ASSERT_TRUE(ask(i).ok());
  const std::size_t before = HeapInUse();
  for (std::uint32_t i = 1; i <= 4096; ++i) {
    Status s = ask(1000 + i);
    ASSERT_TRUE(s.ok()) << "override " << i << ": " << s.message();
  }
  const std::size_t after = HeapInUse();
  // What remains is the memory store's state for the 4096 keys (a few hundred bytes
  // each); per-override limiters cost ~600 KB each.
  EXPECT_LT(after - std::min(after, before), std::size_t{8} << 20)
      << "heap grew from " << before << " to " << after;
  EXPECT_EQ(remote->inner.Stats().keys, 4096u + 16u);
}

// Defect 15: with the store down, each descriptor follows its own failure mode; one
// fail_closed limit must not deny a fail_open one.
TEST_F(EngineTest, StoreDownEachDescriptorFollowsItsOwnFailureMode) {
  auto remote = std::make_shared<RemoteLikeStore>();
  auto c = ParseConfig(R"(
domain: web
descriptors:
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: fail_closed}
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: fail_open}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: local_fallback, fallback_divisor: 2}
)",
                       "engine.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{remote, clock});
  ASSERT_TRUE(e.ok());
  engine = std::move(*e);
  remote->down = true;
  RateLimitResponse r = Ask("web", {D{{{"closed", "a"}}}, D{{{"open", "a"}}}});
  ASSERT_EQ(r.statuses.size(), 2u);
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[0].code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[1].code, Code::kOk);
  // Open and local fallback together: the fallback enforces 4/2 = 2 locally.
  int ok = 0;
  for (int i = 0; i < 5; ++i) {
    r = Ask("web", {D{{{"open", "b"}}}, D{{{"local", "b"}}}});
    EXPECT_EQ(r.statuses[0].code, Code::kOk);
    ok += r.statuses[1].code == Code::kOk;
  }
  EXPECT_EQ(ok, 2);
  const EngineStats st = engine->Stats();
  EXPECT_EQ(st.limiter.store_errors, 6u);
  EXPECT_EQ(st.limiter.fail_closed, 1u);
}

// The asynchronous entry decides exactly as the blocking one.
TEST_F(EngineTest, AsyncDecisionsMatchTheBlockingOnes) {
  Load(kMatching);
  for (int i = 0; i < 5; ++i) {
    RateLimitRequest req;
    req.domain = "web";
    DescriptorRequest d;
    d.entries.push_back(Entry{"remote_address", "9.9.9.9"});
    req.descriptors.push_back(d);
    bool called = false;
    engine->ShouldRateLimitAsync(req, [&](const Status& s, RateLimitResponse& r) {
      called = true;
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(r.statuses.size(), 1u);
      EXPECT_EQ(r.overall_code, i < 3 ? Code::kOk : Code::kOverLimit) << i;
      EXPECT_EQ(r.statuses[0].limit_remaining, i < 3 ? 2u - i : 0u) << i;
    });
    EXPECT_TRUE(called);  // the memory store answers inline
  }
  // Bad input is answered through the callback too.
  RateLimitRequest bad;
  bool called = false;
  engine->ShouldRateLimitAsync(bad, [&](const Status& s, RateLimitResponse&) {
    called = true;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  });
  EXPECT_TRUE(called);
}

// A descriptor left uncharged because another one denied reports what really remains,
// not one less as if it had been charged.
TEST_F(EngineTest, UnchargedDescriptorReportsWhatRemains) {
  Load(kMatching);
  // 10.0.0.1 allows 1 per minute; path /api* allows 2.
  Ask("web", {D{{{"remote_address", "10.0.0.1"}}}});
  RateLimitResponse r = Ask("web", {D{{{"remote_address", "10.0.0.1"}}}, D{{{"path", "/api/x"}}}});
  EXPECT_EQ(r.statuses[0].code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[1].code, Code::kOk);
  EXPECT_EQ(r.statuses[1].limit_remaining, 2u);
}

// envoyproxy/ratelimit parity: its README's `replaces` on an unnamed rule, units week /
// month / year and unit_multiplier, '*' anywhere in a value, share_threshold,
// value_to_metric and quota_mode; OVER_LIMIT reports 0 remaining.
TEST_F(EngineTest, EnvoyRatelimitParity) {
  Load(R"(
domain: web
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          requests_per_unit: 300
          unit: second
          replaces:
            - name: limit2
  - key: key2
    value: value2
    descriptors:
      - key: subkey2
        rate_limit:
          name: limit2
          requests_per_unit: 1
          unit: minute
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: window
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 1}
  - key: path
    value: /api/*/items*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    value_to_metric: true
    metadata: {owner: team-a}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: soft
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  // The unnamed rule replaces limit2 when both match.
  for (int i = 0; i < 3; ++i) {
    RateLimitResponse r = Ask("web", {D{{{"key1", "value1"}, {"subkey1", "x"}}},
                                      D{{{"key2", "value2"}, {"subkey2", "y"}}}});
    EXPECT_EQ(r.overall_code, Code::kOk) << i;
    EXPECT_FALSE(r.statuses[1].has_limit);
  }
  // week: 2 per week; month/year also load (config_test).
  EXPECT_EQ(Passes("web", D{{{"weekly", "a"}}}, 3), 2);
  clock->Advance(6 * 86400 * kSec);
  EXPECT_EQ(Passes("web", D{{{"weekly", "a"}}}, 1), 0);
  // unit_multiplier: a 30-second window.
  EXPECT_EQ(Passes("web", D{{{"window", "a"}}}, 2), 1);
  RateLimitResponse over = Ask("web", {D{{{"window", "a"}}}});
  EXPECT_EQ(over.statuses[0].code, Code::kOverLimit);
  EXPECT_EQ(over.statuses[0].limit_remaining, 0u);
  EXPECT_LE(over.statuses[0].duration_until_reset, 30 * kSec);
  clock->Advance(30 * kSec);
  EXPECT_EQ(Passes("web", D{{{"window", "a"}}}, 1), 1);
  // '*' anywhere: each value has its own counter unless share_threshold.
  EXPECT_EQ(Passes("web", D{{{"path", "/api/v1/items"}}}, 2), 1);
  EXPECT_EQ(Passes("web", D{{{"path", "/api/v2/items/7"}}}, 2), 1);
  EXPECT_FALSE(Ask("web", {D{{{"path", "/api/v1/users"}}}}).statuses[0].has_limit);
  EXPECT_EQ(Passes("web", D{{{"file", "files/a.pdf"}}}, 1), 1);
  EXPECT_EQ(Passes("web", D{{{"file", "files/b.csv"}}}, 2), 1);  // shares the 2 per hour
  // quota_mode: over the limit is answered OK and counted apart.
  EXPECT_EQ(Passes("web", D{{{"soft", "s"}}}, 3), 3);
  Passes("web", D{{{"tenant", "acme"}}}, 1);
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("descriptor=\"soft\",outcome=\"quota_over_limit\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("descriptor=\"tenant|tenant=acme\",outcome=\"ok\"} 1"), std::string::npos) << m;
}

TEST_F(EngineTest, OverrideUnitsWeekMonthYear) {
  Load(kMatching);
  for (int unit : {5, 6, 7}) {
    RateLimitRequest req;
    req.domain = "web";
    DescriptorRequest d;
    // Entry holds views: the value must outlive the request.
    const std::string value = std::to_string(unit);
    d.entries.push_back(Entry{"u", value});
    d.has_override = true;
    d.override_requests_per_unit = 1;
    d.override_unit = unit;
    req.descriptors.push_back(d);
    RateLimitResponse r;
    ASSERT_TRUE(engine->ShouldRateLimit(req, &r).ok()) << unit;
    EXPECT_EQ(static_cast<int>(r.statuses[0].unit), unit);
    ASSERT_TRUE(engine->ShouldRateLimit(req, &r).ok());
    EXPECT_EQ(r.overall_code, Code::kOverLimit) << unit;
  }
}

// Headers: the limit is what remaining counts down from (a token bucket's burst, not its
// rate), every limited descriptor is covered, and the three formats are selectable.
TEST_F(EngineTest, ResponseHeadersInEveryFormat) {
  const std::string rules = R"(
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket, burst: 20, name: per_user}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1000}
)";
  auto headers = [&](const std::string& mode) {
    Load("sluiced: {response_headers: " + mode + "}\n---\n" + rules);
    // Fresh keys per format: the store keeps its counters across loads.
    RateLimitResponse r = Ask("web", {D{{{"user", mode}}}, D{{{"ip", mode}}}});
    std::map<std::string, std::string> h(r.response_headers.begin(), r.response_headers.end());
    return h;
  };
  auto x = headers("x_ratelimit");
  // A token bucket advertises its burst over the time the rate takes to refill it (20 at
  // 100/min: 12 s), as the middleware does (src/http/headers.cc).
  EXPECT_EQ(x["x-ratelimit-limit"], "20, 20;w=12;name=\"per_user\", 1000;w=3600");
  EXPECT_EQ(x["x-ratelimit-remaining"], "19");
  auto plain = headers("ratelimit");
  EXPECT_EQ(plain["ratelimit-remaining"], "19");
  EXPECT_EQ(plain.count("x-ratelimit-remaining"), 0u);
  auto d10 = headers("draft10");
  EXPECT_EQ(d10["ratelimit-policy"], "\"per_user\";q=20;w=12, \"d1\";q=1000;w=3600");
  EXPECT_EQ(d10["ratelimit"].rfind("\"per_user\";r=19;t=", 0), 0u) << d10["ratelimit"];
  EXPECT_NE(d10["ratelimit"].find(", \"d1\";r=999;t=3600"), std::string::npos) << d10["ratelimit"];
  EXPECT_TRUE(headers("none").empty());
  EXPECT_TRUE(headers("false").empty());
}

// Issue #20 item 3: the costs of a repeated descriptor are added into one check; they
// wrapped around 2^64 (2^64-1 + 2 charged 1, 2^63 + 2^63 charged 0: a peek). The sum
// saturates, so it is denied as each cost alone is, and nothing is charged.
TEST_F(EngineTest, CostsOfARepeatedDescriptorDoNotWrapAround) {
  Load(kMatching);
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t half = std::uint64_t{1} << 63;
  const D a{{{"remote_address", "192.0.2.9"}}, max}, b{{{"remote_address", "192.0.2.9"}}, 2};
  EXPECT_EQ(Ask("web", {a}).overall_code, Code::kOverLimit);
  EXPECT_EQ(Ask("web", {a, b}).overall_code, Code::kOverLimit);
  const D h{{{"remote_address", "192.0.2.9"}}, half};
  EXPECT_EQ(Ask("web", {h, h}).overall_code, Code::kOverLimit);
  // Nothing was taken: all 3 of the minute remain.
  EXPECT_EQ(Passes("web", D{{{"remote_address", "192.0.2.9"}}}, 4), 3);
}

// Issue #20 item 5: sluiced_store_keys never fell when keys expired (200k keys still
// counted five minutes after their one-minute windows): the embedded store drops idle
// keys only as new keys arrive. The gauge follows what the store holds.
TEST_F(EngineTest, StoreKeysGaugeFallsWhenKeysExpire) {
  Load(kMatching);
  for (int i = 0; i < 50; ++i)
    Ask("web", {D{{{"remote_address", "192.0.2." + std::to_string(i)}}}});
  std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("sluiced_store_keys{store=\"embedded\"} 50\n"), std::string::npos) << m;
  clock->Advance(61 * kSec);  // every one-minute window is back to full
  m = engine->RenderMetrics();
  EXPECT_NE(m.find("sluiced_store_keys{store=\"embedded\"} 0\n"), std::string::npos) << m;
  // The state was not needed: the limits are whole again.
  EXPECT_EQ(Passes("web", D{{{"remote_address", "192.0.2.1"}}}, 4), 3);
}

// GET /rlconfig serves this: every loaded rule, envoyproxy/ratelimit's line form first.
TEST_F(EngineTest, DumpConfigListsEveryRule) {
  Load(kMatching);
  const std::string d = engine->DumpConfig();
  EXPECT_NE(d.find("web.remote_address: unit=MINUTE requests_per_unit=3, shadow_mode: false, "
                   "algorithm: fixed_window"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("web.path_/login.user: unit=HOUR requests_per_unit=4, shadow_mode: false, "
                   "name: login_per_user"),
            std::string::npos)
      << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), '\n'), 5);
}

// Counts store calls and the checks in each, to see that the limits of one descriptor go
// to the store together.
class CallCountingStore final : public Store {
 public:
  explicit CallCountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    const std::span<const StoreCheck> checks = batch.checks;
    calls.fetch_add(1);
    last_checks.store(checks.size());
    return inner_->Run(batch, out);
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    return inner_->Reset(policy, key);
  }
  std::atomic<int> calls{0};
  std::atomic<std::size_t> last_checks{0};

 private:
  std::shared_ptr<Store> inner_;
};

const char* kMulti = R"(
domain: api
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 5, name: per_minute}
)";

// rate_limits: every limit of the list applies; a request passes only when each has
// room, and then charges each; a denial by one charges none.
TEST_F(EngineTest, SeveralLimitsOnOneDescriptorAreAllOrNothing) {
  auto counting = std::make_shared<CallCountingStore>(store);
  auto c = ParseConfig(kMulti, "engine.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{counting, clock});
  ASSERT_TRUE(e.ok()) << e.status().message();
  engine = std::move(*e);

  for (int i = 0; i < 3; ++i) {
    auto r = Ask("api", {D{{{"user", "u"}}}});
    ASSERT_EQ(r.overall_code, Code::kOk) << i;
    ASSERT_EQ(r.statuses[0].limits.size(), 2u);
    EXPECT_EQ(r.statuses[0].limits[0].limit_remaining, static_cast<std::uint32_t>(2 - i));
    EXPECT_EQ(r.statuses[0].limits[1].limit_remaining, static_cast<std::uint32_t>(4 - i));
    EXPECT_EQ(r.statuses[0].limits[1].name, "per_minute");
  }
  // One store call per request, with both limits in it.
  EXPECT_EQ(counting->calls.load(), 3);
  EXPECT_EQ(counting->last_checks.load(), 2u);
  // The 4th in this second: the per-second limit denies; the status is that limit's.
  auto r = Ask("api", {D{{{"user", "u"}}}});
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[0].code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[0].unit, Unit::kSecond);
  EXPECT_EQ(r.statuses[0].requests_per_unit, 3u);
  ASSERT_EQ(r.statuses[0].limits.size(), 2u);
  EXPECT_EQ(r.statuses[0].limits[0].code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[0].limits[1].code, Code::kOk);
  // ... and the per-minute limit was not charged by the denied request: 2 of 5 left.
  EXPECT_EQ(r.statuses[0].limits[1].limit_remaining, 2u);
  clock->Advance(kSec);
  EXPECT_EQ(Passes("api", D{{{"user", "u"}}}, 3), 2);
  // Now the per-minute limit binds.
  r = Ask("api", {D{{{"user", "u"}}}});
  EXPECT_EQ(r.statuses[0].name, "per_minute");
  EXPECT_EQ(r.statuses[0].code, Code::kOverLimit);
  // Another user has both budgets whole.
  EXPECT_EQ(Passes("api", D{{{"user", "v"}}}, 3), 3);
}

TEST_F(EngineTest, SeveralLimitsAcrossDescriptorsAreOneAtomicDecision) {
  Load(std::string(kMulti) + R"(
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  EXPECT_EQ(Ask("api", {D{{{"user", "u"}}}, D{{{"ip", "1"}}}}).overall_code, Code::kOk);
  // ip=1 denies: neither limit of user=u is charged.
  auto r = Ask("api", {D{{{"user", "u"}}}, D{{{"ip", "1"}}}});
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_EQ(r.statuses[0].code, Code::kOk);
  EXPECT_EQ(r.statuses[0].limits[0].limit_remaining, 2u);
  EXPECT_EQ(r.statuses[0].limits[1].limit_remaining, 4u);
  EXPECT_EQ(Passes("api", D{{{"user", "u"}}}, 3), 2);
}

TEST_F(EngineTest, SeveralLimitsInHeadersRlconfigAndMetrics) {
  Load("sluiced: {response_headers: draft10}\n---\n" + std::string(kMulti));
  auto r = Ask("api", {D{{{"user", "u"}}}});
  std::map<std::string, std::string> h(r.response_headers.begin(), r.response_headers.end());
  EXPECT_EQ(h["ratelimit-policy"], "\"d0.0\";q=3;w=1, \"per_minute\";q=5;w=60");
  EXPECT_EQ(h["ratelimit"].rfind("\"d0.0\";r=2;t=1, \"per_minute\";r=4;t=", 0), 0u)
      << h["ratelimit"];
  Load(kMulti);
  r = Ask("api", {D{{{"user", "w"}}}});
  std::map<std::string, std::string> x(r.response_headers.begin(), r.response_headers.end());
  // The binding limit (least remaining: the per-second one), then every limit.
  EXPECT_EQ(x["x-ratelimit-limit"], "3, 3;w=1, 5;w=60;name=\"per_minute\"");
  EXPECT_EQ(x["x-ratelimit-remaining"], "2");

  const std::string d = engine->DumpConfig();
  EXPECT_NE(d.find("api.user#1: unit=SECOND requests_per_unit=3, shadow_mode: false"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("api.user#2: unit=MINUTE requests_per_unit=5, shadow_mode: false, name: "
                   "per_minute"),
            std::string::npos)
      << d;
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("descriptor=\"user#1\""), std::string::npos) << m;
  EXPECT_NE(m.find("descriptor=\"user#2\""), std::string::npos) << m;
}

TEST_F(EngineTest, ALimitInAListCanBeReplaced) {
  Load(std::string(kMulti) + R"(
  - key: plan
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: per_minute}]}
)");
  auto r = Ask("api", {D{{{"user", "u"}}}, D{{{"plan", "gold"}}}});
  EXPECT_EQ(r.overall_code, Code::kOk);
  // Only the per-second limit of the list is left: the descriptor lists just it.
  ASSERT_EQ(r.statuses[0].limits.size(), 1u);
  EXPECT_EQ(r.statuses[0].unit, Unit::kSecond);
}

TEST_F(EngineTest, MoreThanSixteenMatchedLimitsIsInvalidArgument) {
  std::string yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limits:\n";
  for (int i = 1; i <= 9; ++i) {
    yaml += "      - {unit: hour, requests_per_unit: " + std::to_string(i) + "}\n";
  }
  Load(yaml);
  RateLimitResponse r;
  EXPECT_TRUE(Try("api", {D{{{"user", "a"}}}}, 0, &r).ok());
  Status s = Try("api", {D{{{"user", "a"}}}, D{{{"user", "b"}}}}, 0, &r);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "the request's descriptors match 18 limits (at most 16 in one request)");
}

// `block_for` in a rule (Policy::block_for): once over the limit, the descriptor value is
// denied for the block's length even after its window has rolled over.
TEST_F(EngineTest, BlockForKeepsDenying) {
  Load(R"(
domain: login
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, block_for: 10m}
)");
  EXPECT_EQ(Passes("login", D{{{"user", "eve"}}}, 3), 2);
  clock->Advance(5 * 60 * kSec);  // five windows later: still blocked
  EXPECT_EQ(Passes("login", D{{{"user", "eve"}}}, 1), 0);
  EXPECT_EQ(Passes("login", D{{{"user", "bob"}}}, 1), 1);
  clock->Advance(5 * 60 * kSec);
  EXPECT_EQ(Passes("login", D{{{"user", "eve"}}}, 3), 2);
}

// Counts evaluations and refunds (the lease tests below).
class LeaseCountingStore final : public Store {
 public:
  explicit LeaseCountingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    calls.fetch_add(1);
    return inner_->Run(batch, out);
  }
  Status Refund(std::span<const StoreCheck> checks, Micros now) {
    refunds.fetch_add(1);
    return inner_->Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    return inner_->Reset(policy, key);
  }
  std::atomic<int> calls{0}, refunds{0};

 private:
  std::shared_ptr<Store> inner_;
};

// `lease` in a rule: a hot descriptor is decided from the engine's lease, exactly
// (fixed window), with a store call per lease instead of per request; a request with
// several limits is not leased.
TEST_F(EngineTest, LeasedRulesDecideFromTheLease) {
  auto counting = std::make_shared<LeaseCountingStore>(store);
  auto c = ParseConfig(R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, lease: 20, lease_validity: 1s}
  - key: pair
    rate_limits:
      - {unit: minute, requests_per_unit: 100, lease: 20}
      - {unit: hour, requests_per_unit: 1000, lease: 20}
)",
                       "engine.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{counting, clock});
  ASSERT_TRUE(e.ok()) << e.status().message();
  engine = std::move(*e);
  EXPECT_EQ(Passes("api", D{{{"user", "hot"}}}, 150), 100);
  EXPECT_LT(counting->calls.load(), 100);
  EXPECT_GT(engine->Stats().limiter.lease_hits, 50u);

  // The asynchronous path (gRPC) uses the same lease.
  const int before = counting->calls.load();
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    RateLimitRequest req;
    req.domain = "api";
    req.descriptors.push_back(DescriptorRequest{});
    req.descriptors.back().entries.push_back(Entry{"user", "async"});
    engine->ShouldRateLimitAsync(req, [&](const Status& s, RateLimitResponse& r) {
      ASSERT_TRUE(s.ok()) << s.message();
      ok += r.overall_code == Code::kOk ? 1 : 0;
    });
  }
  EXPECT_EQ(ok, 40);
  EXPECT_LT(counting->calls.load() - before, 20);

  // The lease expires after 1 s: its unused units go back to the store.
  clock->Advance(kSec);
  EXPECT_EQ(Passes("api", D{{{"user", "async"}}}, 1), 1);
  EXPECT_GE(counting->refunds.load(), 1);

  const int multi = counting->calls.load();
  EXPECT_EQ(Passes("api", D{{{"pair", "p"}}}, 10), 10);
  EXPECT_EQ(counting->calls.load() - multi, 10);

  // /metrics shows the lease counters the limiter kept.
  const LimiterStats st = engine->Stats().limiter;
  const std::string m = engine->RenderMetrics();
  for (auto [event, n] : {std::pair{"hit", st.lease_hits}, std::pair{"grant", st.lease_grants},
                          std::pair{"return", st.lease_returns}}) {
    EXPECT_GT(n, 0u) << event;
    const std::string series =
        "sluiced_lease_total{event=\"" + std::string(event) + "\"} " + std::to_string(n) + "\n";
    EXPECT_NE(m.find(series), std::string::npos) << series << m;
  }
}

TEST(EngineConfig, BadLeasesAreNamedWithTheLine) {
  auto bad = [](const std::string& rl) {
    auto c = ParseConfig("domain: a\ndescriptors:\n  - key: k\n    rate_limit: " + rl + "\n",
                         "lease.yaml");
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(bad("{unit: minute, requests_per_unit: 10, lease: 11}")
                .find("lease.yaml:4: rate_limit: lease (11) must not exceed the capacity (10)"),
            std::string::npos);
  EXPECT_NE(bad("{unit: minute, requests_per_unit: 10, lease: 5, algorithm: sliding_window_log}")
                .find("lease does not apply to sliding_window_log"),
            std::string::npos);
  EXPECT_NE(bad("{unit: minute, requests_per_unit: 10, lease: 5, lease_validity: 7s}")
                .find("lease_validity must be 0 (window / 10) or up to window / 10"),
            std::string::npos);
  EXPECT_NE(bad("{unit: minute, requests_per_unit: 10, lease_validity: 1s}")
                .find("lease.yaml:4: lease_validity needs a lease"),
            std::string::npos);
  EXPECT_NE(bad("{unit: minute, requests_per_unit: 10, lease: 5, lease_validity: soon}")
                .find("lease_validity: "),
            std::string::npos);
}

// At the embedded store's key cap a new key is decided by its rule's failure mode: that
// is counted as outcome="key_cap", never as the limit's "over_limit" (or "ok"), and the
// keys held are a gauge.
TEST_F(EngineTest, KeyCapIsReportedApartFromOverLimit) {
  store = std::make_shared<MemoryStore>(MemoryStoreOptions{.max_keys = 2, .shards = 1});
  Load(R"(
sluiced: {max_keys: 2}
domain: d
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 1, failure_mode: fail_closed}
)");
  EXPECT_EQ(Ask("d", {D{{{"open", "a"}}}}).overall_code, Code::kOk);
  EXPECT_EQ(Ask("d", {D{{{"open", "a"}}}}).overall_code, Code::kOverLimit);  // a real denial
  EXPECT_EQ(Ask("d", {D{{{"closed", "b"}}}}).overall_code, Code::kOk);
  // The store holds 2 keys: new ones are at the cap.
  EXPECT_EQ(Ask("d", {D{{{"open", "c"}}}}).overall_code, Code::kOk);           // fail_open
  EXPECT_EQ(Ask("d", {D{{{"closed", "e"}}}}).overall_code, Code::kOverLimit);  // fail_closed
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(
      m.find("sluiced_decisions_total{domain=\"d\",descriptor=\"open\",outcome=\"over_limit\"} 1"),
      std::string::npos)
      << m;
  EXPECT_NE(
      m.find("sluiced_decisions_total{domain=\"d\",descriptor=\"open\",outcome=\"key_cap\"} 1"),
      std::string::npos)
      << m;
  EXPECT_NE(
      m.find(
          "sluiced_decisions_total{domain=\"d\",descriptor=\"closed\",outcome=\"over_limit\"} 0"),
      std::string::npos)
      << m;
  EXPECT_NE(
      m.find("sluiced_decisions_total{domain=\"d\",descriptor=\"closed\",outcome=\"key_cap\"} 1"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("sluiced_store_keys{store=\"embedded\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("sluiced_store_max_keys{store=\"embedded\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("sluiced_key_cap_refusals_total 2"), std::string::npos) << m;
}

// With a remote store a failure-mode decision is a store outage, not the key cap.
TEST_F(EngineTest, RemoteStoreFailuresAreNotKeyCap) {
  auto remote = std::make_shared<RemoteLikeStore>();
  store.reset();
  auto c = ParseConfig(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, "
      "requests_per_unit: 1, failure_mode: fail_closed}\n",
      "engine.yaml");
  ASSERT_TRUE(c.ok());
  auto e = Engine::Create(*c, Engine::Options{remote, clock});
  ASSERT_TRUE(e.ok());
  engine = std::move(*e);
  remote->down = true;
  EXPECT_EQ(Ask("d", {D{{{"k", "a"}}}}).overall_code, Code::kOverLimit);
  const std::string m = engine->RenderMetrics();
  EXPECT_NE(m.find("descriptor=\"k\",outcome=\"key_cap\"} 0"), std::string::npos) << m;
  EXPECT_EQ(m.find("sluiced_store_keys{store=\"embedded\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("sluiced_store_keys{store=\"local_fallback\"} 0"), std::string::npos) << m;
}

}  // namespace
}  // namespace sluice::service

namespace sluice::service {
namespace {

// The permit id of a /v1/acquire answer (the token's part before the '.').
std::string AcquireId(Engine& e) {
  RateLimitRequest req;
  req.domain = "jobs";
  req.descriptors.resize(1);
  req.descriptors[0].entries = {{"tenant", "t"}};
  std::string id;
  e.AcquireAsync(req, [&](const Status& s, PermitResponse& r) {
    EXPECT_TRUE(s.ok()) << s.message();
    id = r.permit.substr(0, r.permit.find('.'));
  });
  return id;
}

// Issue #17 bug 4: sluiced drew permit ids from a per-thread mt19937 seeded once, so a
// forked child (a pre-forking supervisor, a test harness) handed out the very ids its
// parent would hand out next. It now uses the library's generator, reseeded after fork.
TEST(EnginePermitIds, AForkedChildDrawsOtherIdsThanItsParent) {
  auto c = ParseConfig(
      "domain: jobs\ndescriptors:\n  - key: tenant\n    rate_limit: {concurrency: 100, lease: "
      "60s}\n",
      "ids.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{std::make_shared<MemoryStore>(),
                                              std::make_shared<ManualClock>(1785412800000000)});
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(AcquireId(**e).size(), kPermitIdLength);  // this thread's generator is seeded
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string id = AcquireId(**e);
    const ssize_t n = ::write(fds[1], id.data(), id.size());
    ::_exit(n == static_cast<ssize_t>(id.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  const std::string parent = AcquireId(**e);
  char buf[64];
  std::string child;
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) child.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(child.size(), kPermitIdLength);
  EXPECT_NE(child, parent);
}

}  // namespace
}  // namespace sluice::service
