// sluiced as a Rate Limit Quota Service behind the real Envoy's rate_limit_quota filter
// (issue #23, docs/rlqs.md): two Envoys and one sluiced on a real Redis share one global
// limit; a bucket denied by assignment answers 429 in Envoy; the no-assignment and
// expired-assignment behaviours; with Redis down, the failure mode. Waits are on events
// (sluiced's /metrics, responses), request counts are bounded.
#include <gtest/gtest.h>

#include <csignal>

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

  std::string config() const { return dir.File("sluiced.yaml"); }
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
  WriteFile(s->config(), yaml);
  s->sluiced = StartSluiced(s->config(), s->dir.File("sluiced.log"));
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

constexpr const char* kGranted = "sluiced_rlqs_granted_units_total";
constexpr const char* kRefunded = "sluiced_rlqs_refunded_units_total";

// One round of load: 8 requests to each of `envoys`, each answered 200 or 429 by Envoy.
// Adds what each Envoy admitted to `admitted`; returns what the round admitted.
int SendRound(const RlqsStack& s, const std::vector<std::size_t>& envoys,
              std::vector<int>& admitted) {
  int round_admitted = 0;
  for (std::size_t e : envoys) {
    for (int i = 0; i < 8; ++i) {
      const int code = s.Get(e);
      EXPECT_TRUE(code == 200 || code == 429) << "envoy " << e << " answered " << code;
      if (code == 200) {
        ++admitted[e];
        ++round_admitted;
      }
    }
  }
  return round_admitted;
}

// Waits (30 s at most) until sluiced has counted `n` usage reports more than `before`.
bool ReportsArrive(const RlqsStack& s, double before, std::size_t n) {
  const double want = before + static_cast<double>(n);
  if (WaitUntil([&] { return s.Metric("sluiced_rlqs_reports_total") >= want; },
                std::chrono::seconds(30))) {
    return true;
  }
  ADD_FAILURE() << "no usage reports from the Envoys";
  return false;
}

// Rounds (SendRound) to each of `envoys`, each round after as many reports as Envoys,
// until a round admits nothing while the store is used up (`limit` units net of refunds)
// and at most `held` of what the store was charged is not accounted for by the requests
// admitted; at most `rounds`. Adds what each Envoy admitted to `admitted`; false when
// the rounds ran out.
bool RunRounds(RlqsStack& s, const std::vector<std::size_t>& envoys, int limit, int held,
               int rounds, std::vector<int>& admitted) {
  for (int round = 0; round < rounds; ++round) {
    const double reports = s.Metric("sluiced_rlqs_reports_total");
    const int round_admitted = SendRound(s, envoys, admitted);
    if (!ReportsArrive(s, reports, envoys.size())) return false;
    int total = 0;
    for (int a : admitted) total += a;
    const double net = s.Metric(kGranted) - s.Metric(kRefunded);
    if (round_admitted == 0 && net >= limit && net - total <= held) return true;
  }
  return false;
}

// The bound (docs/rlqs.md): what Envoys admit from assignments was charged to the store
// first. With DENY_ALL before the first assignment and after expiry that is all they
// admit: at most the limit, 20 a day across both Envoys, charged to Redis in slices of 5
// (3 tokens at once, 2 refilled over the 2 s TTL) and refills of 2. What an Envoy was
// charged and did not admit goes back to Redis once its reports show it can no longer
// spend it, and is assigned again: together they admit the whole limit (main, without
// refunds: 12).
TEST(EnvoyRlqs, TwoEnvoysShareOneGlobalLimitThroughRedis) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  RlqsFilterOptions f;
  f.domain = "edge";
  auto s = Start(Config((*redis)->Url(), "slice: 0.25, assignment_ttl: 2s",
                        "unit: day, requests_per_unit: 20"),
                 f, 2);
  ASSERT_NE(s, nullptr);
  std::vector<int> admitted = {0, 0};
  const bool used_up = RunRounds(*s, {0, 1}, 20, 0, 60, admitted);
  const int total = admitted[0] + admitted[1];
  ::testing::Test::RecordProperty("admitted",
                                  std::to_string(admitted[0]) + "+" + std::to_string(admitted[1]));
  ASSERT_TRUE(used_up) << "the limit was never used up; admitted " << admitted[0] << " + "
                       << admitted[1] << "; token buckets " << s->Metric(kAssignedTokens)
                       << ", deny_all " << s->Metric(kAssignedDeny) << ", units "
                       << s->Metric(kGranted) << " - " << s->Metric(kRefunded)
                       << " refunded; envoy log:\n"
                       << s->envoys[0]->Log();
  EXPECT_LE(total, 20) << admitted[0] << " + " << admitted[1];
  EXPECT_GE(total, 18) << admitted[0] << " + " << admitted[1];
  EXPECT_GT(admitted[0], 0);
  EXPECT_GT(admitted[1], 0);
  EXPECT_EQ(s->upstream.served(), total);
  EXPECT_LE(s->Metric(kGranted) - s->Metric(kRefunded), 20);
  EXPECT_GT(s->Metric(kRefunded), 0);
  EXPECT_GE(s->Metric(kAssignedTokens), 4);
}

// An Envoy that goes away (killed) leaves its share to the others: while quiet its
// assignment shrinks to 1 unit (what it held beyond goes back), and when its stream ends
// all but what it could still spend (the 1 token and a refill of it: at most 2 units)
// goes back.
// The other Envoy then admits the rest of the limit (main: 10 of the 20 stay with the
// quiet Envoy's slice).
TEST(EnvoyRlqs, AnEnvoyThatGoesAwayLeavesItsShareToTheOthers) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  RlqsFilterOptions f;
  f.domain = "edge";
  auto s = Start(
      Config((*redis)->Url(), "slice: 0.5, assignment_ttl: 2s", "unit: day, requests_per_unit: 20"),
      f, 2);
  ASSERT_NE(s, nullptr);
  // Envoy 1's one request creates its bucket (denied: no assignment yet); it then takes a
  // slice of 10 and, quiet, shrinks by half at each report: 10, 5, 2, 1 (4 token
  // buckets, 6 to be sure), then holds 3 units at most (its bucket and the whole refills
  // renewals charge ahead of the refunds that give their difference back).
  EXPECT_EQ(s->Get(1), 429);
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kAssignedTokens) >= 6; }, std::chrono::seconds(120)))
      << "token buckets " << s->Metric(kAssignedTokens);
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kGranted) - s->Metric(kRefunded) <= 3; },
                        std::chrono::seconds(60)))
      << "granted " << s->Metric(kGranted) << ", refunded " << s->Metric(kRefunded);
  const double refunded = s->Metric(kRefunded);
  const double streams = s->Metric("sluiced_rlqs_streams");
  s->envoys[1].reset();  // SIGKILL: its stream ends
  ASSERT_TRUE(WaitUntil([&] { return s->Metric("sluiced_rlqs_streams") < streams; },
                        std::chrono::seconds(30)));
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kGranted) - s->Metric(kRefunded) <= 2; },
                        std::chrono::seconds(30)))
      << "granted " << s->Metric(kGranted) << ", refunded " << s->Metric(kRefunded) << " (was "
      << refunded << ")";
  std::vector<int> admitted = {0, 0};
  const bool used_up = RunRounds(*s, {0}, 20, 2, 30, admitted);
  ::testing::Test::RecordProperty("admitted", std::to_string(admitted[0]));
  ASSERT_TRUE(used_up) << "admitted " << admitted[0] << "; units " << s->Metric(kGranted) << " - "
                       << s->Metric(kRefunded) << " refunded; envoy log:\n"
                       << s->envoys[0]->Log();
  EXPECT_LE(admitted[0], 20);
  EXPECT_GE(admitted[0], 18);
  EXPECT_EQ(s->upstream.served(), admitted[0]);
}

// sluiced killed (SIGKILL) under load and started again, same config, on the same gRPC
// port (Envoy's cluster points there). During the outage each Envoy answers every
// request itself: it admits at most what its last assignment held (a slice, 12 of the
// 60: 6 tokens at once, 6 refilled over the 2 s TTL), denies the rest, and fails to
// reopen its stream. Once the new sluiced listens, Envoy's reports reach it, it assigns
// from the counter Redis kept, and admissions resume until the limit is used up: over the
// whole test at most the limit is admitted. (What the killed sluiced was charged and
// never gave back stays charged: that only lowers admissions.)
TEST(EnvoyRlqs, ASluicedRestartUnderLoadKeepsTheGlobalLimit) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  RlqsFilterOptions f;
  f.domain = "edge";
  auto s = Start(
      Config((*redis)->Url(), "slice: 0.2, assignment_ttl: 2s", "unit: day, requests_per_unit: 60"),
      f, 2);
  ASSERT_NE(s, nullptr);
  const std::vector<std::size_t> both = {0, 1};
  // Load until both Envoys admit from their assignments.
  std::vector<int> before = {0, 0};
  for (int round = 0; round < 30 && (before[0] == 0 || before[1] == 0); ++round) {
    const double reports = s->Metric("sluiced_rlqs_reports_total");
    SendRound(*s, both, before);
    ASSERT_TRUE(ReportsArrive(*s, reports, both.size()));
  }
  ASSERT_GT(before[0], 0);
  ASSERT_GT(before[1], 0);

  const char* connect_fail = "cluster.sluiced.upstream_cx_connect_fail";
  std::vector<long> failed;
  for (const auto& e : s->envoys) failed.push_back(e->Counter(connect_fail));
  const int grpc_port = s->sluiced.grpc_port;
  s->sluiced.process->Signal(SIGKILL);
  ASSERT_EQ(s->sluiced.process->Wait(std::chrono::seconds(10)), 128 + SIGKILL);
  // The outage, under load: rounds until each Envoy has denied a request and failed to
  // connect to sluiced.
  std::vector<int> outage = {0, 0};
  int outage_rounds = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        SendRound(*s, both, outage);
        ++outage_rounds;
        for (std::size_t e : both) {
          if (outage[e] >= 8 * outage_rounds) return false;
          if (s->envoys[e]->Counter(connect_fail) <= failed[e]) return false;
        }
        return true;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100)))
      << "admitted " << outage[0] << " + " << outage[1] << " in " << outage_rounds
      << " rounds; connect failures " << s->envoys[0]->Counter(connect_fail) << ", "
      << s->envoys[1]->Counter(connect_fail);
  EXPECT_LE(outage[0], 12);
  EXPECT_LE(outage[1], 12);

  s->sluiced = StartSluiced(s->config(), s->dir.File("restarted.log"),
                            {"--grpc", "127.0.0.1:" + std::to_string(grpc_port)});
  ASSERT_EQ(s->sluiced.grpc_port, grpc_port);
  // The Envoys' reports reach the new sluiced (ReportsArrive fails the test when they do
  // not), which assigns token buckets again; rounds until its store refuses (DENY_ALL)
  // and a round admits nothing.
  std::vector<int> after = {0, 0};
  bool used_up = false;
  for (int round = 0; round < 60 && !used_up; ++round) {
    const double reports = s->Metric("sluiced_rlqs_reports_total");
    const int round_admitted = SendRound(*s, both, after);
    ASSERT_TRUE(ReportsArrive(*s, reports, both.size())) << "after the restart; its log:\n"
                                                         << s->sluiced.LogText();
    used_up = round_admitted == 0 && s->Metric(kAssignedDeny) >= 1;
  }
  const int total = before[0] + before[1] + outage[0] + outage[1] + after[0] + after[1];
  ::testing::Test::RecordProperty("admitted",
                                  std::to_string(before[0] + before[1]) + " before, " +
                                      std::to_string(outage[0] + outage[1]) + " during, " +
                                      std::to_string(after[0] + after[1]) + " after the restart");
  EXPECT_GE(s->Metric(kAssignedTokens), 1);
  EXPECT_GT(after[0] + after[1], 0) << "no admission after the restart";
  EXPECT_TRUE(used_up) << "the limit was never used up; admitted " << total << "; units "
                       << s->Metric(kGranted) << " - " << s->Metric(kRefunded) << " refunded";
  EXPECT_LE(total, 60) << before[0] << " + " << before[1] << " before, " << outage[0] << " + "
                       << outage[1] << " during, " << after[0] << " + " << after[1]
                       << " after the restart";
  EXPECT_EQ(s->upstream.served(), total);
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
// follows expired_assignment_behavior (DENY_ALL here, for up to 60 s) though tokens are
// left. (Without expired_assignment_behavior_timeout, Envoy 1.40 goes straight on to
// no_assignment_behavior, ALLOW_ALL here.)
TEST(EnvoyRlqs, AnExpiredAssignmentFollowsTheExpiredBehaviour) {
  RlqsFilterOptions f;
  f.domain = "edge";
  f.no_assignment = {{"blanket_rule", "ALLOW_ALL"}};
  f.expired_timeout = "60s";
  f.reporting_interval = "60s";
  auto s =
      Start(Config("", "slice: 1, assignment_ttl: 2s", "unit: day, requests_per_unit: 5000"), f);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get(0), 200);
  ASSERT_TRUE(WaitUntil([&] { return s->Metric(kAssignedTokens) >= 1; }, std::chrono::seconds(30)));
  ASSERT_TRUE(WaitUntil([&] { return s->Get(0) == 429; }, std::chrono::seconds(60),
                        std::chrono::milliseconds(20)))
      << "token buckets " << s->Metric(kAssignedTokens) << ", served " << s->upstream.served();
  // Denied with most of the 2500 tokens left: the assignment expired, it was not used up
  // (and sluiced sent no DENY_ALL).
  EXPECT_LT(s->upstream.served(), 2500);
  EXPECT_EQ(s->Metric(kAssignedDeny), 0);
}

// Redis down: the rule's failure mode decides what is assigned. fail_closed: DENY_ALL, and
// Envoy answers 429 itself; fail_open: a slice (charged nowhere: outside the bound).
TEST(EnvoyRlqs, WithRedisDownTheFailureModeDecidesTheAssignment) {
  for (const std::string mode : {"fail_closed", "fail_open"}) {
    SCOPED_TRACE(mode);
    auto redis = RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status().ToString();
    const std::string url = (*redis)->Url();
    (*redis)->Stop();
    RlqsFilterOptions f;
    f.domain = "edge";
    f.no_assignment = {{"blanket_rule", "ALLOW_ALL"}};
    f.reporting_interval = "60s";
    auto s = Start(
        Config(url, "slice: 0.5", "unit: day, requests_per_unit: 100, failure_mode: " + mode), f);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->Get(0), 200);  // no assignment yet: ALLOW_ALL
    const char* series = mode == "fail_closed" ? kAssignedDeny : kAssignedTokens;
    ASSERT_TRUE(WaitUntil([&] { return s->Metric(series) >= 1; }, std::chrono::seconds(30)));
    if (mode == "fail_closed") {
      ASSERT_TRUE(WaitUntil([&] { return s->Get(0) == 429; }, std::chrono::seconds(30),
                            std::chrono::milliseconds(20)));
      EXPECT_EQ(s->Get(0), 429);
    } else {
      EXPECT_EQ(s->Get(0), 200);
      EXPECT_EQ(s->Metric(kAssignedDeny), 0);
    }
  }
}

}  // namespace
}  // namespace sluice::testing
