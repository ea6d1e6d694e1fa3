// The Rate Limit Quota Service's stream logic in process (service/rlqs_session.h): bucket
// ids onto descriptors, slices taken from the shared store, deny-all when the limit is
// used up, abandon after a reload removes the rule, bounds on a stream, and the gRPC
// service answering a malformed stream with INVALID_ARGUMENT. Engine on the embedded
// store and a manual clock: every decision is inline.
#include "service/rlqs_session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "rlqs_testing.h"
#include "service/grpc_service.h"
#include "sluice/memory_store.h"
#include "wait.h"

namespace sluice::service {
namespace {

std::string Yaml(const std::string& rlqs, int limit = 100, const std::string& unit = "minute") {
  return "sluiced:\n"
         "  rlqs: {" +
         rlqs +
         "}\n"
         "domain: edge\n"
         "descriptors:\n"
         "  - key: name\n"
         "    value: api\n"
         "    rate_limit: {unit: " +
         unit + ", requests_per_unit: " + std::to_string(limit) + "}\n";
}

class RlqsTest : public ::testing::Test {
 protected:
  void Load(const std::string& yaml) {
    auto c = ParseConfig(yaml, "rlqs.yaml");
    ASSERT_TRUE(c.ok()) << c.status().message();
    auto e = Engine::Create(*c, Engine::Options{std::make_shared<MemoryStore>(), clock});
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine = std::move(*e);
  }
  static Reports Report(std::vector<std::pair<std::map<std::string, std::string>, int>> usages,
                        const std::string& domain = "edge") {
    Reports r;
    r.set_domain(domain);
    for (const auto& [id, allowed] : usages) {
      auto* u = r.add_bucket_quota_usages();
      for (const auto& [k, v] : id) (*u->mutable_bucket_id()->mutable_bucket())[k] = v;
      u->set_num_requests_allowed(allowed);
      u->mutable_time_elapsed()->set_seconds(1);
    }
    return r;
  }
  // Handles `r` on `s`; the decisions are inline on the embedded store.
  static Status Send(RlqsSession& s, const Reports& r, Response* out) {
    bool called = false;
    Status status = Status::Ok();
    s.Handle(r, [&](const Status& st, Response& resp) {
      called = true;
      status = st;
      *out = resp;
    });
    EXPECT_TRUE(called) << "done did not run inline on the embedded store";
    return status;
  }
  // The token bucket size of action `i`, or -1 when it is not one.
  static long Tokens(const Response& r, int i = 0) {
    if (i >= r.bucket_action_size()) return -1;
    const auto& a = r.bucket_action(i);
    if (!a.quota_assignment_action().rate_limit_strategy().has_token_bucket()) return -1;
    return a.quota_assignment_action().rate_limit_strategy().token_bucket().max_tokens();
  }
  // Units an assignment (action `i`) can admit in one TTL: max_tokens + tokens_per_fill
  // (a refill over 1000 TTLs, for a 1-unit slice, counts nothing).
  static long Units(const Response& r, int i = 0) {
    const auto& tb =
        r.bucket_action(i).quota_assignment_action().rate_limit_strategy().token_bucket();
    const long ttl =
        r.bucket_action(i).quota_assignment_action().assignment_time_to_live().seconds();
    return tb.max_tokens() +
           (tb.fill_interval().seconds() <= ttl * 100 ? tb.tokens_per_fill().value() : 0);
  }
  static bool Blanket(const Response& r, envoy::type::v3::RateLimitStrategy::BlanketRule rule,
                      int i = 0) {
    if (i >= r.bucket_action_size()) return false;
    const auto& s = r.bucket_action(i).quota_assignment_action().rate_limit_strategy();
    return s.strategy_case() == envoy::type::v3::RateLimitStrategy::kBlanketRule &&
           s.blanket_rule() == rule;
  }

  // 100 an hour in slices of 20 (10 tokens at once, 10 refilled over the 10 s TTL).
  void LoadSlicesOf20() { Load(Yaml("slice: 0.2, assignment_ttl: 10s", 100, "hour")); }
  // Units taken from the store for assignments, and given back.
  std::uint64_t Granted() const { return engine->metrics().rlqs().granted_units.load(); }
  std::uint64_t Refunded() const { return engine->metrics().rlqs().refunded_units.load(); }

  // The first report of {name: api} on `s`, with nothing used: its assignment's units.
  long FirstSlice(RlqsSession& s) {
    Response out;
    EXPECT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
    return out.bucket_action_size() == 1 ? Units(out) : -1;
  }

  // A client of the RLQS service of `server`.
  static std::unique_ptr<rlqs_pb::RateLimitQuotaService::Stub> Stub(const GrpcServer& server) {
    return rlqs_pb::RateLimitQuotaService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::unique_ptr<Engine> engine;
};

TEST(RlqsBucketDescriptor, AllKeysSortedByNameWhenNoKeysAreConfigured) {
  envoy::service::rate_limit_quota::v3::BucketId id;
  (*id.mutable_bucket())["zone"] = "eu";
  (*id.mutable_bucket())["name"] = "api";
  (*id.mutable_bucket())["env"] = "prod";
  const auto e = BucketDescriptor(RlqsSettings{}, id.bucket());
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].key, "env");
  EXPECT_EQ(e[1].key, "name");
  EXPECT_EQ(e[1].value, "api");
  EXPECT_EQ(e[2].key, "zone");
}

TEST(RlqsBucketDescriptor, ConfiguredKeysInTheirOrderMissingOnesLeftOutOthersIgnored) {
  envoy::service::rate_limit_quota::v3::BucketId id;
  (*id.mutable_bucket())["name"] = "api";
  (*id.mutable_bucket())["user"] = "alice";
  (*id.mutable_bucket())["trace"] = "x";
  RlqsSettings s;
  s.descriptor_keys = {"user", "tenant", "name"};
  const auto e = BucketDescriptor(s, id.bucket());
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].key, "user");
  EXPECT_EQ(e[0].value, "alice");
  EXPECT_EQ(e[1].key, "name");
  s.descriptor_keys = {"tenant"};
  EXPECT_TRUE(BucketDescriptor(s, id.bucket()).empty());
}

TEST(RlqsConfig, SettingsErrorsNameTheLine) {
  auto bad = ParseConfig("sluiced:\n  rlqs:\n    slice: 2\ndomain: d\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("r.yaml:3: rlqs.slice must be a number in (0, 1]"),
            std::string::npos)
      << bad.status().message();
  bad = ParseConfig("sluiced:\n  rlqs:\n    slices: 1\ndomain: d\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("r.yaml:3: unknown field 'slices' in rlqs settings"),
            std::string::npos)
      << bad.status().message();
  bad = ParseConfig("sluiced:\n  rlqs:\n    descriptor_keys: [a, a]\ndomain: d\n", "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lists 'a' twice"), std::string::npos);
  auto ok = ParseConfig(
      "sluiced:\n  rlqs: {descriptor_keys: [name], slice: 0.25, assignment_ttl: 3s, "
      "max_buckets_per_stream: 7}\ndomain: d\n",
      "r.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->settings.rlqs.descriptor_keys, std::vector<std::string>{"name"});
  EXPECT_EQ(ok->settings.rlqs.slice, 0.25);
  EXPECT_EQ(ok->settings.rlqs.assignment_ttl, 3 * kSec);
  EXPECT_EQ(ok->settings.rlqs.max_buckets_per_stream, 7u);
}

// A bucket's first report takes a slice (slice * capacity) from the store and assigns it
// as a token bucket that admits at most the slice in one TTL: half at once, half refilled
// over the TTL; the TTL is no longer than the window left.
TEST_F(RlqsTest, FirstReportAssignsASliceOfTheLimitAsATokenBucket) {
  Load(Yaml("slice: 0.2, assignment_ttl: 30s"));
  clock->Set(kNoon + 45 * kSec);  // 15 s left in the minute
  RlqsSession s(*engine);
  Response out;
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 1}}), &out).ok());
  ASSERT_EQ(out.bucket_action_size(), 1);
  EXPECT_EQ(Tokens(out), 10);
  const auto& q = out.bucket_action(0).quota_assignment_action();
  EXPECT_EQ(q.assignment_time_to_live().seconds(), 15);
  const auto& tb = q.rate_limit_strategy().token_bucket();
  EXPECT_EQ(tb.tokens_per_fill().value(), 10u);
  EXPECT_EQ(tb.fill_interval().seconds(), 30);
  EXPECT_EQ(out.bucket_action(0).bucket_id().bucket().at("name"), "api");
  EXPECT_EQ(engine->metrics().rlqs().granted_units.load(), 20u);
}

// Two streams (two Envoys) share the limit through the store: fresh slices each TTL until
// it is used up (smaller ones at the end), then DENY_ALL; never more units assigned than
// the limit, and every unit of it assigned. Each stream reports its last slice used up
// (nothing to give back) and a demand above the slice.
TEST_F(RlqsTest, StreamsShareTheLimitAndGetDenyAllWhenItIsUsedUp) {
  Load(Yaml("slice: 0.3, assignment_ttl: 5s"));  // slices of 30 of 100 a minute
  RlqsSession a(*engine), b(*engine);
  RlqsSession* streams[2] = {&a, &b};
  bool denied[2] = {false, false};
  int used[2] = {30, 30};
  long assigned = 0;
  Response out;
  for (int round = 0; round < 10 && !(denied[0] && denied[1]); ++round) {
    for (int i = 0; i < 2; ++i) {
      if (denied[i]) continue;
      ASSERT_TRUE(Send(*streams[i], Report({{{{"name", "api"}}, used[i]}}), &out).ok());
      ASSERT_EQ(out.bucket_action_size(), 1) << "round " << round;
      if (Blanket(out, envoy::type::v3::RateLimitStrategy::DENY_ALL)) {
        denied[i] = true;
        continue;
      }
      ASSERT_GT(Tokens(out), 0);
      ASSERT_LE(Units(out), 30);
      assigned += Units(out);
      used[i] = static_cast<int>(Units(out));
    }
    clock->Advance(5 * kSec);  // every assignment expired: the next report takes a fresh one
  }
  EXPECT_TRUE(denied[0] && denied[1]);
  EXPECT_EQ(assigned, 100);
  EXPECT_EQ(engine->metrics().rlqs().granted_units.load(), 100u);
  // The next window: a slice again.
  EXPECT_EQ(engine->metrics().rlqs().refunded_units.load(), 0u);
  clock->Set(kNoon + 61 * kSec);
  ASSERT_TRUE(Send(a, Report({{{{"name", "api"}}, 30}}), &out).ok());
  EXPECT_EQ(Units(out), 30);
}

// A token bucket is renewed (its refill taken from the store, the same strategy resent so
// Envoy keeps its tokens) only when it would expire before the report after next; a
// renewal the store denies becomes DENY_ALL.
TEST_F(RlqsTest, RenewsBeforeTheTtlEndsAndDeniesWhenTheRefillIsRefused) {
  Load(Yaml("slice: 0.2, assignment_ttl: 10s", 50, "hour"));  // slices of 10: 5 + 5 refilled
  RlqsSession s(*engine);
  Response first, out;
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &first).ok());
  ASSERT_EQ(Units(first), 10);
  clock->Advance(5 * kSec);  // 5 s left, reports every 1 s: nothing to do
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 3}}), &out).ok());
  EXPECT_EQ(out.bucket_action_size(), 0) << out.DebugString();
  clock->Advance(3500'000);  // 1.5 s left
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 3}}), &out).ok());
  ASSERT_EQ(out.bucket_action_size(), 1);
  EXPECT_EQ(out.bucket_action(0).quota_assignment_action().rate_limit_strategy().DebugString(),
            first.bucket_action(0).quota_assignment_action().rate_limit_strategy().DebugString());
  EXPECT_EQ(out.bucket_action(0).quota_assignment_action().assignment_time_to_live().seconds(), 10);
  EXPECT_EQ(engine->metrics().rlqs().granted_units.load(), 15u);
  // Renewals until the limit (50) is used: 15 + 7 * 5 = 50; the next one is refused.
  for (int i = 0; i < 7; ++i) {
    clock->Advance(9 * kSec);
    ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 5}}), &out).ok());
    ASSERT_EQ(Tokens(out), 5) << "renewal " << i;
  }
  EXPECT_EQ(engine->metrics().rlqs().granted_units.load(), 50u);
  clock->Advance(9 * kSec);
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 5}}), &out).ok());
  EXPECT_TRUE(Blanket(out, envoy::type::v3::RateLimitStrategy::DENY_ALL)) << out.DebugString();
}

// What an assignment was charged and Envoy did not spend goes back to the store once a
// report made after the assignment's end (its TTL + the 1 s delivery bound) shows it;
// before that, only what Envoy could not spend even with its tokens and their refill.
TEST_F(RlqsTest, UnusedQuotaGoesBackOnceAReportShowsTheAssignmentEndedUnspent) {
  LoadSlicesOf20();
  RlqsSession s(*engine);
  ASSERT_EQ(FirstSlice(s), 20);
  Response out;
  // 4 used, 5 s left: Envoy may still spend its 10 tokens and 6 of refill: nothing back.
  clock->Advance(5 * kSec);
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 4}}), &out).ok());
  EXPECT_EQ(out.bucket_action_size(), 0);
  EXPECT_EQ(Refunded(), 0u);
  // No report until 1 s after the TTL: the assignment ended with 16 units unspent. They
  // go back, and a fresh slice is taken.
  clock->Advance(6 * kSec);
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
  EXPECT_EQ(Refunded(), 16u);
  ASSERT_EQ(Units(out), 20);
  EXPECT_EQ(Granted(), 40u);
  EXPECT_EQ(StoreLeft(*engine, 100), 100 - 40 + 16);
}

// A reload may move a limit to another store key (new parameters): what was charged
// under the old rules is not refunded under the new ones.
TEST_F(RlqsTest, NoRefundAcrossAReloadOfTheRules) {
  LoadSlicesOf20();
  RlqsSession s(*engine);
  ASSERT_EQ(FirstSlice(s), 20);
  auto c = ParseConfig(Yaml("slice: 0.2, assignment_ttl: 10s", 200, "hour"), "rlqs.yaml");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(engine->Reload(*c).ok());
  clock->Advance(11 * kSec);  // the assignment ended unspent: refundable but for the reload
  Response out;
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
  EXPECT_EQ(Refunded(), 0u);
  EXPECT_GT(Units(out), 0);  // a fresh slice, under the new rules
}

// A stream that ends (Envoy gone, or its connection): Envoy may still spend, until its
// TTL, what it held at its last report; everything it was charged beyond that goes back.
TEST_F(RlqsTest, AnEndedStreamGivesBackWhatEnvoyCanNoLongerSpend) {
  LoadSlicesOf20();
  {
    RlqsSession s(*engine);
    ASSERT_EQ(FirstSlice(s), 20);
    Response out;
    clock->Advance(8500'000);  // 1.5 s left: renewed, 10 more units charged
    ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 2}}), &out).ok());
    ASSERT_EQ(Tokens(out), 10);
    EXPECT_EQ(Granted() - Refunded(), 30u);
    clock->Advance(kSec);
  }
  // Charged 30, reported 2; after its last report Envoy may spend its 10 tokens and the
  // refill of 11 s (10 s of TTL + the delivery bound): 21. 7 go back.
  EXPECT_EQ(Refunded(), 7u);
  EXPECT_EQ(StoreLeft(*engine, 100), 100 - 30 + 7);
}

// An Envoy that stops reporting with its stream open: once a bucket was not reported for
// two reporting intervals and the delivery bound, what Envoy can no longer spend goes
// back as at the stream's end, once per silence; the ledger stays open for its next report.
TEST_F(RlqsTest, ASilentStreamGivesBackWhatEnvoyCanNoLongerSpend) {
  LoadSlicesOf20();
  RlqsSession s(*engine);
  EXPECT_EQ(s.NextSilence(), 0);  // no bucket yet
  ASSERT_EQ(FirstSlice(s), 20);
  Response out;
  clock->Advance(8500'000);  // 1.5 s left: renewed, 10 more units charged
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 2}}), &out).ok());
  ASSERT_EQ(Tokens(out), 10);
  const Micros report = clock->Now();
  EXPECT_EQ(s.NextSilence(), report + 3 * kSec);  // 2 intervals of 1 s + the bound
  clock->Advance(kSec);
  s.Sweep(clock->Now());  // one interval late is not silent yet
  EXPECT_EQ(Refunded(), 0u);
  EXPECT_EQ(engine->metrics().rlqs().silences.load(), 0u);
  clock->Advance(2 * kSec);
  s.Sweep(clock->Now());
  // As AnEndedStreamGivesBackWhatEnvoyCanNoLongerSpend: charged 30, reported 2, Envoy may
  // still spend 21.
  EXPECT_EQ(Refunded(), 7u);
  EXPECT_EQ(engine->metrics().rlqs().silences.load(), 1u);
  EXPECT_EQ(s.NextSilence(), 0);  // settled for this silence
  clock->Advance(kSec);
  s.Sweep(clock->Now());
  EXPECT_EQ(Refunded(), 7u);
  EXPECT_EQ(StoreLeft(*engine, 100), 100 - 30 + 7);
  // Envoy reports again (3 allowed, within what it could still spend): nothing more goes
  // back twice, and the bucket can go silent again.
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 3}}), &out).ok());
  EXPECT_EQ(Refunded(), 7u);
  EXPECT_EQ(s.NextSilence(), clock->Now() + 3 * kSec);
}

// Assignments follow the reported demand: a quiet bucket's slice shrinks at its renewals,
// by half at a time, down to 1 unit (the rest of an old one goes back once it ended); a
// bucket whose reports show denials gets the configured slice again.
TEST_F(RlqsTest, AssignmentsShrinkForAQuietBucketAndGrowWithDemand) {
  LoadSlicesOf20();
  RlqsSession s(*engine);
  ASSERT_EQ(FirstSlice(s), 20);
  Response out;
  // Quiet (nothing used) until the renewal 2 s before the TTL (10 s): replaced by 10.
  for (int i = 0; i < 8; ++i) {
    clock->Advance(kSec);
    ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
  }
  ASSERT_EQ(out.bucket_action_size(), 1) << "no renewal at 2 s before the TTL";
  EXPECT_EQ(Units(out), 10);
  EXPECT_EQ(Granted(), 30u);
  // One report later (1 s after the old slice ended) its 20 unused units are back;
  // Envoy may still spend the new bucket's 5 tokens and 5 of refill.
  clock->Advance(kSec);
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
  EXPECT_EQ(Refunded(), 20u);
  // Still quiet at its renewal (TTL at 18 s): 5 units.
  for (int i = 0; i < 7 && out.bucket_action_size() == 0; ++i) {
    clock->Advance(kSec);
    ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 0}}), &out).ok());
  }
  ASSERT_EQ(out.bucket_action_size(), 1);
  EXPECT_EQ(Units(out), 5);
  // Demand: 10 denied a second until the renewal of that bucket (TTL at 26 s).
  out.Clear();
  for (int i = 0; i < 8 && out.bucket_action_size() == 0; ++i) {
    clock->Advance(kSec);
    Reports r = Report({{{{"name", "api"}}, 0}});
    r.mutable_bucket_quota_usages(0)->set_num_requests_denied(10);
    ASSERT_TRUE(Send(s, r, &out).ok());
  }
  ASSERT_EQ(out.bucket_action_size(), 1);
  EXPECT_EQ(Units(out), 20);
}

TEST_F(RlqsTest, UnlimitedBucketIsAllowedAndAReloadThatRemovesTheRuleAbandonsIt) {
  Load(Yaml(""));
  RlqsSession s(*engine);
  Response out;
  ASSERT_TRUE(Send(s, Report({{{{"name", "other"}}, 1}, {{{"name", "api"}}, 1}}), &out).ok());
  ASSERT_EQ(out.bucket_action_size(), 2);
  int allow = 0, tokens = 0;
  for (int i = 0; i < 2; ++i) {
    allow += Blanket(out, envoy::type::v3::RateLimitStrategy::ALLOW_ALL, i);
    tokens += Tokens(out, i) == 5;
  }
  EXPECT_EQ(allow, 1);
  EXPECT_EQ(tokens, 1);
  auto c = ParseConfig(
      "domain: edge\ndescriptors:\n  - key: name\n    value: web\n"
      "    rate_limit: {unit: minute, requests_per_unit: 5}\n",
      "rlqs.yaml");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(engine->Reload(*c).ok());
  ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 1}}), &out).ok());
  ASSERT_EQ(out.bucket_action_size(), 1);
  EXPECT_TRUE(out.bucket_action(0).has_abandon_action());
  EXPECT_EQ(s.buckets(), 1u);  // "other" stays, "api" is forgotten
}

// Every bucket figure comes per bucket id as well as summed: two streams report {name:
// api} (limited: slices of 20) and one of them {name: other} (no rule: ALLOW_ALL).
TEST_F(RlqsTest, MetricsCountEachBucketIdApartAndSumThemInTheTotals) {
  LoadSlicesOf20();
  RlqsSession a(*engine), b(*engine);
  Response out;
  ASSERT_TRUE(Send(a, Report({{{{"name", "api"}}, 3}, {{{"name", "other"}}, 4}}), &out).ok());
  ASSERT_TRUE(Send(b, Report({{{{"name", "api"}}, 5}}), &out).ok());
  std::string text;
  engine->metrics().Render(text);
  const auto has = [&](const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos;
  };
  const std::string api = "{domain=\"edge\",bucket=\"name=api\"";
  const std::string other = "{domain=\"edge\",bucket=\"name=other\"";
  EXPECT_TRUE(has("sluiced_rlqs_bucket_reports_total" + api + "} 2"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_reports_total" + other + "} 1"));
  EXPECT_TRUE(has("sluiced_rlqs_reports_total 3"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_reported_requests_total" + api + ",result=\"allowed\"} 8"));
  EXPECT_TRUE(has("sluiced_rlqs_reported_requests_total{result=\"allowed\"} 12"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_granted_units_total" + api + "} 40"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_granted_units_total" + other + "} 0"));
  EXPECT_TRUE(has("sluiced_rlqs_granted_units_total 40"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_assignments_total" + api + ",action=\"token_bucket\"} 2"));
  EXPECT_TRUE(has("sluiced_rlqs_bucket_assignments_total" + other + ",action=\"allow_all\"} 1"));
  EXPECT_TRUE(has("sluiced_rlqs_assignments_total{action=\"allow_all\"} 1"));
  EXPECT_EQ(text.find("# TYPE sluiced_rlqs_bucket_reports_total counter"),
            text.rfind("# TYPE sluiced_rlqs_bucket_reports_total counter"))
      << "one TYPE line per series name";
}

TEST_F(RlqsTest, MalformedMessagesAreRefusedNamingWhatIsWrong) {
  Load(Yaml(""));
  Response out;
  {
    RlqsSession s(*engine);
    Status st = Send(s, Report({{{{"name", "api"}}, 1}}, ""), &out);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("no domain"), std::string::npos) << st.message();
  }
  {
    RlqsSession s(*engine);
    ASSERT_TRUE(Send(s, Report({{{{"name", "api"}}, 1}}), &out).ok());
    // Later messages may leave the domain out, never change it.
    EXPECT_TRUE(Send(s, Report({{{{"name", "api"}}, 1}}, ""), &out).ok());
    Status st = Send(s, Report({{{{"name", "api"}}, 1}}, "other"), &out);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("domain changed from 'edge' to 'other'"), std::string::npos);
  }
  {
    RlqsSession s(*engine);
    Status st = Send(s, Report({{{{"name", "api"}}, 1}, {{}, 1}}), &out);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(st.message(), "bucket_quota_usages[1].bucket_id is empty");
    st = Send(s, Report({{{{"name", ""}}, 1}}), &out);
    EXPECT_EQ(st.message(), "bucket_quota_usages[0].bucket_id has an empty key or value");
    st = Send(s, Report({{{{"name", "\xff"}}, 1}}), &out);
    EXPECT_NE(st.message().find("not valid UTF-8"), std::string::npos);
  }
}

TEST_F(RlqsTest, AStreamHoldsAtMostMaxBucketsPerStream) {
  Load(Yaml("max_buckets_per_stream: 3"));
  RlqsSession s(*engine);
  Response out;
  ASSERT_TRUE(
      Send(s, Report({{{{"u", "1"}}, 1}, {{{"u", "2"}}, 1}, {{{"u", "3"}}, 1}}), &out).ok());
  EXPECT_TRUE(Send(s, Report({{{{"u", "1"}}, 1}}), &out).ok());  // known buckets: fine
  Status st = Send(s, Report({{{{"u", "4"}}, 1}}), &out);
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(st.message().find("more than 3 buckets on one stream"), std::string::npos);
  EXPECT_EQ(s.buckets(), 3u);
}

// Through gRPC: a malformed stream ends with INVALID_ARGUMENT and the reason.
TEST_F(RlqsTest, GrpcStreamWithoutDomainEndsWithInvalidArgument) {
  Load(Yaml(""));
  auto server = GrpcServer::Start(*engine, "127.0.0.1:0", 1 << 20);
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto stub = Stub(**server);
  // A good stream first: its assignment comes back.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->StreamRateLimitQuotas(&ctx);
    ASSERT_TRUE(stream->Write(Report({{{{"name", "api"}}, 1}})));
    Response r;
    ASSERT_TRUE(stream->Read(&r));
    EXPECT_EQ(Tokens(r), 5);
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->StreamRateLimitQuotas(&ctx);
  ASSERT_TRUE(stream->Write(Report({{{{"name", "api"}}, 1}}, "")));
  Response r;
  EXPECT_FALSE(stream->Read(&r));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("no domain"), std::string::npos) << st.error_message();
  EXPECT_EQ(engine->metrics().rlqs().stream_errors.load(), 1u);
}

// Through gRPC: a stream that stays open without reporting gets its unused units back
// from the stream's alarm, without a message or the stream's end.
TEST_F(RlqsTest, GrpcStreamThatGoesSilentGetsItsUnusedUnitsBack) {
  LoadSlicesOf20();
  auto server = GrpcServer::Start(*engine, "127.0.0.1:0", 1 << 20);
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto stub = Stub(**server);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->StreamRateLimitQuotas(&ctx);
  Response r;
  ASSERT_TRUE(stream->Write(Report({{{{"name", "api"}}, 0}})));
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(Units(r), 20);
  // As in ASilentStreamGivesBackWhatEnvoyCanNoLongerSpend: renewed, 30 charged, 21 held.
  clock->Advance(8500'000);
  ASSERT_TRUE(stream->Write(Report({{{{"name", "api"}}, 2}})));
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_EQ(Tokens(r), 10);
  // Silent from 3 s after that report (the alarm's real wait too: the manual clock does
  // not move by itself).
  clock->Advance(3 * kSec);
  // (The alarm's thread settles the bucket, then counts it: wait for both.) The first
  // report's own silence may be counted too: its alarm waits 3 s of real time, and on a
  // machine that stalls the test that long before the second report, it fires with the
  // clock already 8.5 s on. Envoy could then still spend all of its 20 units (a silence
  // settles what was spendable at the last report), so nothing goes back at that one:
  // the 7 units come back only at this silence.
  EXPECT_TRUE(sluice::testing::WaitUntil([&] {
    return engine->metrics().rlqs().silences.load() >= 1 && Refunded() == 7;
  })) << "the silent bucket was not settled while the stream stayed open: silent "
      << engine->metrics().rlqs().silences.load() << ", refunded " << Refunded();
  EXPECT_EQ(engine->metrics().rlqs().streams_closed.load(), 0u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(Refunded(), 7u);  // the stream's end gives back nothing twice
}

}  // namespace
}  // namespace sluice::service
