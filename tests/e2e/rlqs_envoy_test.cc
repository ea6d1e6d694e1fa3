// sluiced as a Rate Limit Quota Service behind the real Envoy's rate_limit_quota filter
// (issue #23, docs/rlqs.md): two Envoys and one sluiced on a real Redis share one global
// limit; a bucket denied by assignment answers 429 in Envoy; the no-assignment and
// expired-assignment behaviours. Waits are on events (sluiced's /metrics, responses),
// request counts are bounded.
#include <gtest/gtest.h>

#include "e2e.h"
#include "envoy_rlqs.h"
#include "redis_server.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// sluiced with `yaml` (its `sluiced:` block gets `redis:` when `redis` is not empty), an
// upstream and Envoys with the rate_limit_quota filter `filter`.
struct RlqsStack {
  TempDir dir;
  HttpUpstream upstream;
  Sluiced sluiced;
  std::vector<std::unique_ptr<Envoy>> envoys;

  double Metric(const std::string& series) const { return SluicedMetric(sluiced, series); }
  // GET / through Envoy `i`: its status (0 when there is no answer).
  int Get(std::size_t i) const {
    httplib::Client c("127.0.0.1", envoys[i]->port());
    c.set_connection_timeout(5);
    c.set_read_timeout(10);
    auto r = c.Get("/");
    return r ? r->status : 0;
  }
};

std::unique_ptr<RlqsStack> Start(const std::string& yaml, const RlqsFilterOptions& filter,
                                 int envoys = 1) {
  auto s = std::make_unique<RlqsStack>();
  WriteFile(s->dir.File("sluiced.yaml"), yaml);
  s->sluiced = StartSluiced(s->dir.File("sluiced.yaml"), s->dir.File("sluiced.log"));
  if (s->sluiced.grpc_port == 0) return nullptr;
  for (int i = 0; i < envoys; ++i) {
    EnvoyOptions o = RlqsEnvoyOptions(filter);
    o.upstream_port = s->upstream.port();
    o.rls_port = s->sluiced.grpc_port;
    auto e = Envoy::Start(std::move(o));
    if (!e.ok()) {
      ADD_FAILURE() << e.status().ToString();
      return nullptr;
    }
    s->envoys.push_back(std::move(*e));
  }
  return s;
}

std::string Config(const std::string& redis, const std::string& rlqs, const std::string& limit) {
  return "sluiced:\n" + (redis.empty() ? std::string() : "  redis: " + redis + "\n") + "  rlqs: {" +
         rlqs +
         "}\n"
         "domain: edge\n"
         "descriptors:\n"
         "  - key: name\n"
         "    value: api\n"
         "    rate_limit: {" +
         limit + "}\n";
}

constexpr const char* kAssignedTokens = R"(sluiced_rlqs_assignments_total{action="token_bucket"})";
constexpr const char* kAssignedDeny = R"(sluiced_rlqs_assignments_total{action="deny_all"})";

// The bound (docs/rlqs.md): what Envoys admit from assignments was charged to the store
// first. With DENY_ALL before the first assignment and after expiry that is all they
// admit: at most the limit, 20 a day across both Envoys, charged to Redis in slices of 5
// (3 tokens at once, 2 refilled over the 2 s TTL) and refills of 2.
TEST(EnvoyRlqs, TwoEnvoysShareOneGlobalLimitThroughRedis) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  RlqsFilterOptions f;
  f.domain = "edge";
  auto s = Start(Config((*redis)->Url(), "slice: 0.25, assignment_ttl: 2s",
                        "unit: day, requests_per_unit: 20"),
                 f, 2);
  ASSERT_NE(s, nullptr);
  int admitted[2] = {0, 0};
  int last_round = -1;
  // Rounds of 8 requests to each Envoy (more than a slice), each round after both Envoys
  // reported again; until both are denied by assignment and a round admits nothing.
  for (int round = 0; round < 40; ++round) {
    const double reports = s->Metric("sluiced_rlqs_reports_total");
    int round_admitted = 0;
    for (std::size_t e = 0; e < 2; ++e) {
      for (int i = 0; i < 8; ++i) {
        const int code = s->Get(e);
        ASSERT_TRUE(code == 200 || code == 429) << "envoy " << e << " answered " << code;
        if (code == 200) {
          ++admitted[e];
          ++round_admitted;
        }
      }
    }
    if (round_admitted == 0 && s->Metric(kAssignedDeny) >= 2) {
      last_round = round;
      break;
    }
    ASSERT_TRUE(WaitUntil([&] { return s->Metric("sluiced_rlqs_reports_total") >= reports + 2; },
                          std::chrono::seconds(30)))
        << "no usage reports from the Envoys";
  }
  ASSERT_GE(last_round, 0) << "the limit was never used up; admitted " << admitted[0] << " + "
                           << admitted[1] << "; token buckets " << s->Metric(kAssignedTokens)
                           << ", deny_all " << s->Metric(kAssignedDeny) << ", units "
                           << s->Metric("sluiced_rlqs_granted_units_total") << "; envoy log:\n"
                           << s->envoys[0]->Log();
  const int total = admitted[0] + admitted[1];
  ::testing::Test::RecordProperty("admitted",
                                  std::to_string(admitted[0]) + "+" + std::to_string(admitted[1]));
  EXPECT_LE(total, 20) << admitted[0] << " + " << admitted[1];
  EXPECT_GE(total, 10) << admitted[0] << " + " << admitted[1];
  EXPECT_GT(admitted[0], 0);
  EXPECT_GT(admitted[1], 0);
  EXPECT_EQ(s->upstream.served(), total);
  EXPECT_LE(s->Metric("sluiced_rlqs_granted_units_total"), 20);
  EXPECT_GE(s->Metric(kAssignedTokens), 4);
}

// A limit of 0 (a ban): sluiced assigns DENY_ALL, and Envoy answers 429 itself. With
// ALLOW_ALL before the first assignment, the first request passes (uncharged: outside the
// bound, docs/rlqs.md), then none.
TEST(EnvoyRlqs, ABucketDeniedByAssignmentAnswers429InEnvoy) {
  RlqsFilterOptions f;
  f.domain = "edge";
  f.no_assignment = {{"blanket_rule", "ALLOW_ALL"}};
  f.reporting_interval = "60s";
  auto s = Start(Config("", "", "unit: hour, requests_per_unit: 0"), f);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get(0), 200);
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kAssignedDeny) >= 1; }, std::chrono::seconds(30)));
  ASSERT_TRUE(WaitUntil([&] { return s->Get(0) == 429; }, std::chrono::seconds(30),
                        std::chrono::milliseconds(20)));
  const long served = s->upstream.served();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s->Get(0), 429) << "request " << i;
  EXPECT_EQ(s->upstream.served(), served);
  // One report (the bucket's first): Envoy decided the rest without sluiced.
  EXPECT_EQ(s->Metric("sluiced_rlqs_reports_total"), 1);
}

// Before its first assignment a bucket follows no_assignment_behavior (DENY_ALL here);
// then it gets its slice (10 of 100: 5 at once, 5 refilled over the 10 s TTL) and no
// more: the report interval is long enough that nothing is renewed during the test.
TEST(EnvoyRlqs, NoAssignmentBehaviourUntilTheFirstAssignmentThenAtMostTheSlice) {
  RlqsFilterOptions f;
  f.domain = "edge";
  f.reporting_interval = "60s";
  auto s = Start(Config("", "slice: 0.1", "unit: day, requests_per_unit: 100"), f);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get(0), 429);  // no assignment yet: the bucket is created by this request
  int admitted = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        admitted += s->Get(0) == 200;
        return admitted > 0;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(20)));
  for (int i = 0; i < 15; ++i) admitted += s->Get(0) == 200;
  EXPECT_GE(admitted, 5);
  EXPECT_LE(admitted, 10);
  EXPECT_EQ(s->upstream.served(), admitted);
  EXPECT_EQ(s->Metric("sluiced_rlqs_granted_units_total"), 10);
}

// An assignment lives its TTL (2 s): with no report in between to renew it, Envoy then
// follows expired_assignment_behavior (DENY_ALL here) though tokens are left.
TEST(EnvoyRlqs, AnExpiredAssignmentFollowsTheExpiredBehaviour) {
  RlqsFilterOptions f;
  f.domain = "edge";
  f.no_assignment = {{"blanket_rule", "ALLOW_ALL"}};
  f.reporting_interval = "60s";
  auto s =
      Start(Config("", "slice: 1, assignment_ttl: 2s", "unit: day, requests_per_unit: 5000"), f);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get(0), 200);
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kAssignedTokens) >= 1; }, std::chrono::seconds(30)));
  ASSERT_TRUE(WaitUntil([&] { return s->Get(0) == 429; }, std::chrono::seconds(60),
                        std::chrono::milliseconds(20)));
  // Denied with most of the 2500 tokens left: the assignment expired, it was not used up.
  EXPECT_LT(s->upstream.served(), 2500);
  EXPECT_EQ(s->Metric(kAssignedTokens), 1);
}

}  // namespace
}  // namespace sluice::testing
