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

// The `sluiced:` block of every config here, then the domain Envoy's filter asks for.
constexpr const char* kHead =
    "sluiced:\n"
    "  default_algorithm: sliding_window_log\n"
    "  reload_poll: 0\n"
    "domain: e2e\n";

TEST(EnvoyDescriptors, RemoteAddressDeniesWith429AndXEnvoyRatelimited) {
  auto s = StartStack(std::string(kHead) +
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

}  // namespace
}  // namespace sluice::testing
