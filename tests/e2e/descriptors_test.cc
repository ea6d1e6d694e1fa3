// What Envoy users configure, through a real Envoy: descriptors from remote_address,
// request_headers, generic_key and header_value_match, a `limit` override from dynamic
// metadata, 429 with x-envoy-ratelimited, Envoy's X-RateLimit headers filled from
// sluiced's answer, sluiced's response_headers_to_add, shadow and quota mode.
//
// Every limit is a sliding window log of an hour: no window boundary can fall between
// two requests of a test, and nothing refills while it runs.
#include <gtest/gtest.h>

#include "e2e.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// The `sluiced:` block of every config here (plus `settings`, indented lines), then the
// domain Envoy's filter asks for.
std::string Head(const std::string& settings = "") {
  return "sluiced:\n"
         "  default_algorithm: sliding_window_log\n"
         "  reload_poll: 0\n" +
         settings + "domain: e2e\n";
}

TEST(EnvoyDescriptors, RemoteAddressDeniesWith429AndXEnvoyRatelimited) {
  auto s = StartStack(Head() +
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    value: 127.0.0.1\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 2}\n",
                      {.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])")});
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 2; ++i) {
    auto r = s->Get();
    ASSERT_TRUE(r) << "request " << i;
    EXPECT_EQ(r->status, 200) << "request " << i;
    EXPECT_EQ(r->body, "upstream");
    EXPECT_EQ(Header(r, "x-envoy-ratelimited"), "");
  }
  auto denied = s->Get();
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 429);
  EXPECT_EQ(Header(denied, "x-envoy-ratelimited"), "true");
  EXPECT_EQ(s->upstream.served(), 2);
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.ok"), 2);
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.over_limit"), 1);
}

TEST(EnvoyDescriptors, RequestHeadersGiveEachValueItsOwnCounter) {
  auto s = StartStack(Head() +
                          "descriptors:\n"
                          "  - key: api_key\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 1}\n",
                      {.rate_limits = json::parse(R"([{"actions": [{"request_headers":
                          {"header_name": "x-api-key", "descriptor_key": "api_key"}}]}])")});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get("/", {{"x-api-key", "a"}})->status, 200);
  EXPECT_EQ(s->Get("/", {{"x-api-key", "a"}})->status, 429);
  EXPECT_EQ(s->Get("/", {{"x-api-key", "b"}})->status, 200);
  // No header: Envoy builds no descriptor and does not ask sluiced.
  EXPECT_EQ(s->Get("/")->status, 200);
  EXPECT_EQ(s->Get("/")->status, 200);
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.over_limit"), 1);
  EXPECT_EQ(s->upstream.served(), 4);
}

TEST(EnvoyDescriptors, GenericKeyAndHeaderValueMatchBuildOneNestedDescriptor) {
  auto s = StartStack(Head() +
                          "descriptors:\n"
                          "  - key: generic_key\n"
                          "    value: checkout\n"
                          "    descriptors:\n"
                          "      - key: header_match\n"
                          "        value: beta\n"
                          "        rate_limit: {unit: hour, requests_per_unit: 1}\n",
                      {.rate_limits = json::parse(R"([{"actions": [
                          {"generic_key": {"descriptor_value": "checkout"}},
                          {"header_value_match": {"descriptor_value": "beta",
                            "headers": [{"name": "x-beta", "present_match": true}]}}]}])")});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get("/", {{"x-beta", "1"}})->status, 200);
  EXPECT_EQ(s->Get("/", {{"x-beta", "1"}})->status, 429);
  // Without the header the header_value_match action fails: no descriptor at all.
  EXPECT_EQ(s->Get("/")->status, 200);
  EXPECT_EQ(s->Get("/")->status, 200);
}

TEST(EnvoyDescriptors, LimitOverrideFromDynamicMetadataWinsOverTheConfig) {
  // set_metadata puts {requests_per_unit: 1, unit: HOUR} where the route's `limit`
  // reads it; the configured rule (100 an hour) alone would allow every request here.
  EnvoyOptions o;
  o.filters_before = json::parse(R"([{"name": "envoy.filters.http.set_metadata",
      "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config",
        "metadata": [{"metadata_namespace": "sluice.e2e",
                      "value": {"limit": {"requests_per_unit": 1, "unit": "HOUR"}}}]}}])");
  o.rate_limits = json::parse(R"([{"actions": [{"generic_key": {"descriptor_value": "override"}}],
      "limit": {"dynamic_metadata": {"metadata_key": {"key": "sluice.e2e",
                                                      "path": [{"key": "limit"}]}}}}])");
  o.filter = {{"enable_x_ratelimit_headers", "DRAFT_VERSION_03"}};
  // (response_headers: none, so the X-RateLimit-* seen are Envoy's alone.)
  auto s = StartStack(Head("  response_headers: none\n") +
                          "descriptors:\n"
                          "  - key: generic_key\n"
                          "    value: override\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 100}\n",
                      o);
  ASSERT_NE(s, nullptr);
  auto first = s->Get();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(Header(first, "x-ratelimit-limit").substr(0, 2), "1,")
      << Header(first, "x-ratelimit-limit");
  EXPECT_EQ(s->Get()->status, 429);
}

TEST(EnvoyDescriptors, XRateLimitHeadersCarrySluicedsAnswer) {
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])");
  o.filter = {{"enable_x_ratelimit_headers", "DRAFT_VERSION_03"}};
  // sluiced's own headers off: the X-RateLimit-* seen are Envoy's, built from
  // current_limit, limit_remaining and duration_until_reset.
  auto s = StartStack(Head("  response_headers: none\n") +
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 3}\n",
                      o);
  ASSERT_NE(s, nullptr);
  for (int remaining : {2, 1, 0}) {
    auto r = s->Get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(Header(r, "x-ratelimit-limit"), "3, 3;w=3600");
    EXPECT_EQ(Header(r, "x-ratelimit-remaining"), std::to_string(remaining));
    const int reset = std::stoi(Header(r, "x-ratelimit-reset"));
    EXPECT_GT(reset, 3500);
    EXPECT_LE(reset, 3600);
  }
  auto denied = s->Get();
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 429);
  EXPECT_EQ(Header(denied, "x-ratelimit-remaining"), "0");
  EXPECT_EQ(Header(denied, "x-ratelimit-limit"), "3, 3;w=3600");
}

TEST(EnvoyDescriptors, ResponseHeadersToAddReachTheClient) {
  auto s = StartStack(Head("  response_headers: draft10\n") +
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 1, name: per_ip}\n",
                      {.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])")});
  ASSERT_NE(s, nullptr);
  auto ok = s->Get();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(Header(ok, "ratelimit-policy"), "\"per_ip\";q=1;w=3600");
  EXPECT_EQ(Header(ok, "ratelimit").substr(0, 13), "\"per_ip\";r=0;") << Header(ok, "ratelimit");
  auto denied = s->Get();
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 429);
  EXPECT_EQ(Header(denied, "ratelimit-policy"), "\"per_ip\";q=1;w=3600");
  EXPECT_FALSE(Header(denied, "retry-after").empty());
}

TEST(EnvoyDescriptors, ShadowModeCountsButNeverDenies) {
  auto s = StartStack(Head() +
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    shadow_mode: true\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 1}\n",
                      {.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])")});
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s->Get()->status, 200) << "request " << i;
  EXPECT_EQ(s->upstream.served(), 3);
  // Envoy saw every answer OK (a counter never incremented may be absent: -1).
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.ok"), 3);
  EXPECT_LE(s->envoy->Counter("cluster.upstream.ratelimit.over_limit"), 0);
  EXPECT_EQ(
      s->Metric(R"(sluiced_shadow_over_limit_total{domain="e2e",descriptor="remote_address"})"), 2);
}

TEST(EnvoyDescriptors, QuotaModeReportsOverLimitButAnswersOk) {
  auto s = StartStack(Head() +
                          "descriptors:\n"
                          "  - key: remote_address\n"
                          "    quota_mode: true\n"
                          "    rate_limit: {unit: hour, requests_per_unit: 1}\n",
                      {.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])")});
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s->Get()->status, 200) << "request " << i;
  EXPECT_EQ(s->upstream.served(), 3);
  EXPECT_EQ(
      s->Metric(
          R"(sluiced_decisions_total{domain="e2e",descriptor="remote_address",outcome="quota_over_limit"})"),
      2);
}

}  // namespace
}  // namespace sluice::testing
