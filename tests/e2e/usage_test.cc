// Costs through a real Envoy (issue #21 items 3 and 4): a rate limit's `hits_addend` (a
// number or a format string) as sluiced reads it, and the LLM-gateway recipe of
// docs/llm-budgets.md: the request-time call only asks "is budget left?" (hits_addend 0),
// the upstream reports the tokens it used in a response header, Envoy sends that at
// stream end (apply_on_stream_done) and sluiced charges it, even past the budget
// (overage: charge), so the key's next request is refused.
//
// Envoy's stream-end call is made after the client has its response: the tests wait for
// Envoy to have completed its calls to sluiced (the cluster's upstream_rq_completed)
// before the next request, never for time to pass.
#include <gtest/gtest.h>

#include "e2e.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// Waits until Envoy has completed `calls` requests to sluiced (each a ShouldRateLimit).
void WaitForRlsCalls(const Stack& s, long calls) {
  long seen = -1;
  EXPECT_TRUE(WaitUntil(
      [&] {
        seen = s.envoy->Counter("cluster.sluiced.upstream_rq_completed");
        return seen >= calls;
      },
      std::chrono::seconds(30)))
      << "Envoy completed " << seen << " calls to sluiced, expected " << calls << "\n"
      << s.envoy->Log();
}

// The request's API key and, when given, the tokens the upstream reports using.
httplib::Headers Key(const std::string& key, const std::string& tokens = "") {
  httplib::Headers h = {{"x-api-key", key}};
  if (!tokens.empty()) h.emplace("x-echo-x-tokens-used", tokens);
  return h;
}

// hits_addend as a format string of a request header: sluiced charges what Envoy sends
// (3), and 0 only looks. The rate limits are the filter's own `rate_limits`: Envoy 1.40
// honours `hits_addend` there, and sends a descriptor's hits_addend; on the route's
// `rate_limits` it accepts the field and ignores it (every request then costs 1: tried
// with this test, docs/llm-budgets.md).
TEST(EnvoyHitsAddend, FilterRateLimitsHitsAddendChargesItsValueAndZeroOnlyLooks) {
  EnvoyOptions o;
  o.filter = {{"enable_x_ratelimit_headers", "DRAFT_VERSION_03"},
              {"rate_limits", json::parse(R"([{"actions": [{"request_headers":
      {"header_name": "x-api-key", "descriptor_key": "api_key"}}],
      "hits_addend": {"format": "%REQ(x-cost)%"}}])")}};
  auto s = StartStack(
      "sluiced:\n"
      "  default_algorithm: sliding_window_log\n"
      "  response_headers: none\n"
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: api_key\n"
      "    rate_limit: {unit: hour, requests_per_unit: 5}\n",
      o);
  ASSERT_NE(s, nullptr);
  auto look = [&](const std::string& cost) {
    auto h = Key("a");
    h.emplace("x-cost", cost);
    return s->Get("/", h);
  };
  auto r = look("0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Header(r, "x-ratelimit-remaining"), "5");  // looked, charged nothing
  r = look("3");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Header(r, "x-ratelimit-remaining"), "2");
  r = look("0");
  ASSERT_TRUE(r);
  EXPECT_EQ(Header(r, "x-ratelimit-remaining"), "2");
  r = look("3");  // 3 do not fit in the 2 left: denied, nothing taken (overage: reject)
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  r = look("2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Header(r, "x-ratelimit-remaining"), "0");
  EXPECT_EQ(s->upstream.served(), 4);
  if (HasFailure()) ADD_FAILURE() << s->envoy->Log();
}

// The recipe's rate limits (docs/llm-budgets.md shows the same), the filter's own: one
// descriptor per API key, asked at request time with hits_addend 0 and charged at
// stream end with the upstream's x-tokens-used.
json LlmRateLimits() {
  return json::parse(R"([
    {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}}],
     "hits_addend": {"number": 0}},
    {"actions": [{"request_headers": {"header_name": "x-api-key", "descriptor_key": "api_key"}}],
     "apply_on_stream_done": true,
     "hits_addend": {"format": "%RESP(x-tokens-used)%"}}])");
}

// 1000 tokens a minute and 20000 a day per API key, with `overage` as given.
std::string LlmConfig(const std::string& overage) {
  return "sluiced:\n"
         "  reload_poll: 0\n"
         "domain: e2e\n"
         "descriptors:\n"
         "  - key: api_key\n"
         "    rate_limits:\n"
         "      - {unit: minute, requests_per_unit: 1000, name: tokens_per_minute,\n"
         "         algorithm: token_bucket, overage: " +
         overage +
         "}\n"
         "      - {unit: day, requests_per_unit: 20000, name: tokens_per_day,\n"
         "         algorithm: sliding_window_counter, overage: " +
         overage + "}\n";
}

// overage: charge: a report of 5000 tokens against the 400 left is charged (the key is
// in debt), and the key's next request is refused at its request-time check.
// overage: reject (the default) is the leak issue #21 describes: the same report is
// denied and charges nothing, and the key goes on.
class EnvoyLlmBudget : public ::testing::TestWithParam<std::string> {};

TEST_P(EnvoyLlmBudget, ATokenReportOvershootsOnceThenTheKeyIsRefused) {
  const bool charge = GetParam() == "charge";
  auto s = StartStack(LlmConfig(GetParam()), {.filter = {{"rate_limits", LlmRateLimits()}}});
  ASSERT_NE(s, nullptr);
  // 600 tokens: within the minute's 1000.
  auto r = s->Get("/", Key("k1", "600"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  WaitForRlsCalls(*s, 2);  // the request-time look and the stream-end report
  // 400 left: the look passes; the answer reports 5000, far past the budget.
  r = s->Get("/", Key("k1", "5000"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << "the look charges nothing and 400 are left";
  WaitForRlsCalls(*s, 4);
  r = s->Get("/", Key("k1", "1"));
  ASSERT_TRUE(r);
  if (charge) {
    EXPECT_EQ(r->status, 429) << "the 5000 were charged: the key is in debt";
    EXPECT_EQ(Header(r, "x-envoy-ratelimited"), "true");
    EXPECT_EQ(s->upstream.served(), 2);
  } else {
    EXPECT_EQ(r->status, 200) << "overage: reject drops the report: the 400 are still there";
    EXPECT_EQ(s->upstream.served(), 3);
  }
  // Another key has its own budget.
  r = s->Get("/", Key("k2", "10"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  if (HasFailure()) ADD_FAILURE() << s->envoy->Log();
}

INSTANTIATE_TEST_SUITE_P(Overage, EnvoyLlmBudget, ::testing::Values("charge", "reject"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sluice::testing
