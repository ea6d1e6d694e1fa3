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

httplib::Headers Key(const std::string& key) {
  return {{"x-api-key", key}};
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

}  // namespace
}  // namespace sluice::testing
