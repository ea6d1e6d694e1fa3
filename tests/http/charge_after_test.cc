// Route::after (issue #21): the middleware checks "is budget left?" before the handler
// and charges the response's cost after it: from a response header (the tokens an LLM
// backend used) and/or only for chosen statuses (only 401s for a login limit), under
// each policy's overage. Bad cost values: counted, reported, nothing charged twice.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "http/http_test_util.h"
#include "http/middleware_impl.h"

namespace sluice::http {
namespace {

using std::chrono::minutes;
using testing::FakeHeaders;
using testing::kNoon;
using testing::MakeLimiter;

struct Stack {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<Limiter> limiter;
  std::unique_ptr<Middleware> mw;
  std::vector<std::string> bad;  // on_bad_cost calls

  Stack(Policy p, AfterResponse after, std::string path = "/v1/chat") {
    limiter = MakeLimiter({std::move(p)}, clock);
    MiddlewareOptions o;
    o.limiter = limiter;
    o.routes = {{.name = "chat",
                 .path = std::move(path),
                 .limits = {{.policy = limiter->policies()[0].name, .key = {KeyPart::kApiKey}}},
                 .after = std::move(after)}};
    o.on_bad_cost = [this](std::string_view route, std::string_view header,
                           std::string_view value) {
      bad.push_back(std::string(route) + " " + std::string(header) + "=" + std::string(value));
    };
    auto r = Middleware::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) mw = std::move(r).value();
  }
  Verdict Check(const std::string& key, const std::string& path = "/v1/chat") {
    FakeHeaders h{{"X-API-Key", key}};
    return mw->Check(Request{"POST", path, "192.0.2.1", &h});
  }
  std::uint64_t Remaining(const std::string& key) {
    auto d = limiter->Peek("key:" + key);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? d->remaining : 0;
  }
};

Policy Tokens(Overage overage) {
  Policy p = Policy::FixedWindow("tokens", 1000, minutes(1));
  p.overage = overage;
  return p;
}

TEST(ChargeAfter, CheckTakesNothingAndTheResponseHeaderIsCharged) {
  Stack s(Tokens(Overage::kCharge), {.cost_header = "X-Tokens-Used"});
  Verdict v = s.Check("k1");
  ASSERT_TRUE(v.pass());
  ASSERT_EQ(v.deferred.size(), 1u);
  EXPECT_EQ(s.Remaining("k1"), 1000u);  // the check only looked
  FakeHeaders res{{"X-Tokens-Used", "600"}};
  auto d = s.mw->Charge(v, 200, &res);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(s.Remaining("k1"), 400u);
  // Charged once: the verdict's limits are gone.
  EXPECT_TRUE(v.deferred.empty());
  ASSERT_TRUE(s.mw->Charge(v, 200, &res).ok());
  EXPECT_EQ(s.Remaining("k1"), 400u);
  EXPECT_EQ(s.mw->Stats().charged, 1u);
}

TEST(ChargeAfter, AnOvershootIsChargedAsDebtAndTheNextRequestIsRefused) {
  Stack s(Tokens(Overage::kCharge), {.cost_header = "X-Tokens-Used"});
  Verdict v = s.Check("k1");
  ASSERT_TRUE(v.pass());
  FakeHeaders res{{"X-Tokens-Used", "5000"}};  // far past the 1000 of the minute
  auto d = s.mw->Charge(v, 200, &res);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(d->charged, 0u);  // taken anyway, up to the debt bound
  Verdict next = s.Check("k1");
  EXPECT_EQ(next.status, 429);
  EXPECT_TRUE(next.deferred.empty());  // a refused request is never charged
  EXPECT_TRUE(s.Check("k2").pass());   // another key has its own budget
  // The window rolls over: the debt of a fixed window is repaid with it.
  s.clock->Advance(60 * testing::kSec);
  EXPECT_TRUE(s.Check("k1").pass());
}

TEST(ChargeAfter, UnderRejectAnOvershootIsDroppedAsBefore) {
  Stack s(Tokens(Overage::kReject), {.cost_header = "X-Tokens-Used"});
  Verdict v = s.Check("k1");
  FakeHeaders res{{"X-Tokens-Used", "900"}};
  ASSERT_TRUE(s.mw->Charge(v, 200, &res).ok());
  EXPECT_EQ(s.Remaining("k1"), 100u);
  v = s.Check("k1");
  FakeHeaders over{{"X-Tokens-Used", "500"}};
  auto d = s.mw->Charge(v, 200, &over);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(s.Remaining("k1"), 100u);  // reject: a cost that does not fit takes nothing
}

TEST(ChargeAfter, OnlyTheChosenStatusesAreCounted) {
  // A login limit: only failed logins (401) count, 5 a minute per key.
  Stack s(Policy::FixedWindow("login", 5, minutes(1)), {.statuses = {401}}, "/login");
  for (int i = 0; i < 10; ++i) {
    Verdict v = s.Check("alice", "/login");
    ASSERT_TRUE(v.pass()) << i;
    ASSERT_TRUE(s.mw->Charge(v, 200, nullptr).ok());  // successful logins are free
  }
  EXPECT_EQ(s.mw->Stats().not_counted, 10u);
  for (int i = 0; i < 5; ++i) {
    Verdict v = s.Check("alice", "/login");
    ASSERT_TRUE(v.pass()) << i;
    ASSERT_TRUE(s.mw->Charge(v, 401, nullptr).ok());  // no cost header: the route's cost
  }
  EXPECT_EQ(s.Check("alice", "/login").status, 429);
  EXPECT_EQ(s.mw->Stats().charged, 5u);
}

TEST(ChargeAfter, ABadCostHeaderChargesNothingAndIsReported) {
  Stack s(Tokens(Overage::kCharge), {.cost_header = "X-Tokens-Used"});
  for (const char* bad :
       {"-5", "abc", "1.5", "", "+3", "4294967297", "99999999999999999999999", "12 34"}) {
    Verdict v = s.Check("k1");
    ASSERT_TRUE(v.pass());
    FakeHeaders res{{"X-Tokens-Used", bad}};
    auto d = s.mw->Charge(v, 200, &res);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("X-Tokens-Used"), std::string::npos)
        << d.status().message();
    // Never charged on a retry either.
    EXPECT_TRUE(v.deferred.empty());
    ASSERT_TRUE(s.mw->Charge(v, 200, &res).ok());
  }
  EXPECT_EQ(s.Remaining("k1"), 1000u);
  EXPECT_EQ(s.mw->Stats().bad_costs, 8u);
  ASSERT_EQ(s.bad.size(), 8u);
  EXPECT_EQ(s.bad[0], "chat X-Tokens-Used=-5");
  // Whitespace around a number is fine, and 0 charges nothing.
  Verdict v = s.Check("k1");
  FakeHeaders ok{{"X-Tokens-Used", " 7 "}};
  ASSERT_TRUE(s.mw->Charge(v, 200, &ok).ok());
  EXPECT_EQ(s.Remaining("k1"), 993u);
  v = s.Check("k1");
  FakeHeaders zero{{"X-Tokens-Used", "0"}};
  ASSERT_TRUE(s.mw->Charge(v, 200, &zero).ok());
  EXPECT_EQ(s.Remaining("k1"), 993u);
}

TEST(ChargeAfter, ParseCostTakesWholeNumbersUpTo2To32) {
  EXPECT_EQ(internal::ParseCost("0"), 0u);
  EXPECT_EQ(internal::ParseCost("4294967296"), 4294967296u);
  EXPECT_EQ(internal::ParseCost("\t12\t"), 12u);
  EXPECT_EQ(internal::ParseCost("4294967297"), std::nullopt);
  EXPECT_EQ(internal::ParseCost("0x10"), std::nullopt);
  EXPECT_EQ(internal::ParseCost(" "), std::nullopt);
}

TEST(ChargeAfter, CreateRefusesWhatCannotBeChargedAfter) {
  auto limiter = MakeLimiter({Policy::FixedWindow("t", 10, minutes(1)),
                              Policy::Concurrency("c", 2, std::chrono::seconds(30))},
                             std::make_shared<ManualClock>(kNoon));
  auto err = [&](Route r) {
    MiddlewareOptions o;
    o.limiter = limiter;
    o.routes = {std::move(r)};
    auto m = Middleware::Create(std::move(o));
    return m.ok() ? std::string("ok") : m.status().message();
  };
  EXPECT_EQ(err({.limits = {{.policy = "t"}}, .after = AfterResponse{.statuses = {99}}}),
            "routes[0].after.statuses[0] must be an HTTP status 100-599 (got 99)");
  EXPECT_EQ(err({.limits = {{.policy = "t"}}, .after = AfterResponse{.cost_header = "bad name"}}),
            "routes[0].after.cost_header 'bad name' is not a header field name");
  EXPECT_NE(err({.limits = {{.policy = "c"}}, .after = AfterResponse{}}).find("concurrency"),
            std::string::npos);
  EXPECT_NE(err({.limits = {{.policy = "t"}}, .max_delay = 1000, .after = AfterResponse{}})
                .find("max_delay"),
            std::string::npos);
  EXPECT_EQ(err({.limits = {{.policy = "t"}}, .after = AfterResponse{.cost_header = "X-Cost"}}),
            "ok");
}

}  // namespace
}  // namespace sluice::http
