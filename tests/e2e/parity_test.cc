// envoyproxy/ratelimit parity through a real Envoy (issue #21 item 5): its README's
// example configs load in sluiced and behave as that README says.
#include <gtest/gtest.h>

#include "e2e.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// envoyproxy/ratelimit's README, "Example 3": a limit per IP, and one IP banned with
// `requests_per_unit: 0` ("Black list IP"), which envoyproxy/ratelimit loads and answers
// OVER_LIMIT for every request. Envoy takes the address from a header here (every
// loopback client is 127.0.0.1).
TEST(EnvoyParity, ReadmeExample3BansAnAddressWithRequestsPerUnitZero) {
  EnvoyOptions o;
  o.domain = "edge_proxy_per_ip";
  o.rate_limits = json::parse(R"([{"actions": [{"request_headers":
      {"header_name": "x-client-ip", "descriptor_key": "remote_address"}}]}])");
  o.filter = {{"enable_x_ratelimit_headers", "DRAFT_VERSION_03"}};
  auto s = StartStack(
      "sluiced:\n"
      "  response_headers: none\n"
      "domain: edge_proxy_per_ip\n"
      "descriptors:\n"
      "  - key: remote_address\n"
      "    rate_limit:\n"
      "      unit: second\n"
      "      requests_per_unit: 10\n"
      "\n"
      "  # Black list IP\n"
      "  - key: remote_address\n"
      "    value: 50.0.0.5\n"
      "    rate_limit:\n"
      "      unit: second\n"
      "      requests_per_unit: 0\n",
      o);
  ASSERT_NE(s, nullptr);
  // The banned address: denied from its first request on, and every time.
  for (int i = 0; i < 3; ++i) {
    auto r = s->Get("/", {{"x-client-ip", "50.0.0.5"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429) << "request " << i;
    EXPECT_EQ(Header(r, "x-ratelimit-limit"), "0, 0;w=1");
    EXPECT_EQ(Header(r, "x-ratelimit-remaining"), "0");
  }
  // Any other address gets its 10 per second.
  auto other = s->Get("/", {{"x-client-ip", "50.0.0.1"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(Header(other, "x-ratelimit-limit"), "10, 10;w=1");
  EXPECT_EQ(s->upstream.served(), 1);
  EXPECT_EQ(s->envoy->Counter("cluster.upstream.ratelimit.over_limit"), 3);
}

// A banned value in shadow mode is reported, never denied (as any limit in shadow mode).
TEST(EnvoyParity, RequestsPerUnitZeroInShadowModeOnlyCounts) {
  auto s = StartStack(
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: remote_address\n"
      "    shadow_mode: true\n"
      "    rate_limit: {unit: hour, requests_per_unit: 0}\n",
      {.rate_limits = json::parse(R"([{"actions": [{"remote_address": {}}]}])")});
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(s->Get()->status, 200) << "request " << i;
  EXPECT_EQ(
      s->Metric(R"(sluiced_shadow_over_limit_total{domain="e2e",descriptor="remote_address"})"), 2);
}

// sluice's rule holds for a ban too: a request that a banned descriptor denies charges
// none of its other descriptors (envoyproxy/ratelimit would charge them).
TEST(EnvoyParity, ABanChargesTheRequestsOtherLimitsNothing) {
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([
      {"actions": [{"generic_key": {"descriptor_value": "a"}}]},
      {"actions": [{"request_headers": {"header_name": "x-user", "descriptor_key": "user"}}]}])");
  auto s = StartStack(
      "sluiced:\n"
      "  default_algorithm: sliding_window_log\n"
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: generic_key\n"
      "    value: a\n"
      "    rate_limit: {unit: hour, requests_per_unit: 2}\n"
      "  - key: user\n"
      "    value: mallory\n"
      "    rate_limit: {unit: hour, requests_per_unit: 0}\n",
      o);
  ASSERT_NE(s, nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s->Get("/", {{"x-user", "mallory"}})->status, 429) << "request " << i;
  }
  // generic_key=a still has both of its 2.
  EXPECT_EQ(s->Get()->status, 200);
  EXPECT_EQ(s->Get()->status, 200);
  EXPECT_EQ(s->Get()->status, 429);
}

// The sluice fields that shape a counter make no sense on a ban: refused, naming the line.
// `sluiced --check-config` on `yaml`: exit 1 and "bad.yaml:" + `error` in its output.
void ExpectRefused(const std::string& yaml, const std::string& error) {
  TempDir dir;
  WriteFile(dir.File("bad.yaml"), yaml);
  auto p = Process::Spawn({SluicedBinary(), "--check-config", dir.File("bad.yaml")},
                          dir.File("out.log"));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 1);
  const std::string out = ReadFile(dir.File("out.log"));
  EXPECT_NE(out.find("bad.yaml:" + error), std::string::npos) << out;
}

TEST(EnvoyParity, ABanWithCounterFieldsIsRefusedNamingTheLine) {
  ExpectRefused(
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: remote_address\n"
      "    rate_limit:\n"
      "      unit: second\n"
      "      requests_per_unit: 0\n"
      "      burst: 5\n",
      "7: requests_per_unit: 0 denies every request; burst does not apply");
}

TEST(EnvoyParity, MetadataThatIsNotAMappingIsRefusedNamingTheLine) {
  ExpectRefused(
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: tenant\n"
      "    metadata: [pool-a]\n"
      "    rate_limit: {unit: second, requests_per_unit: 1}\n",
      "4: metadata must be a mapping");
}

// A descriptor's `metadata` comes back to Envoy as the response's dynamic metadata (in
// the namespace envoy.filters.http.ratelimit, under the field "metadata" as
// envoyproxy/ratelimit sends it) while the descriptor is under its limit: here the route
// copies it into a response header. Several OK descriptors merge, the first one's field
// winning (envoyproxy/ratelimit's TestOverlappingMetadataReturnsTheFirstValue).
TEST(EnvoyParity, DescriptorMetadataReachesEnvoysDynamicMetadataUnderTheLimit) {
  EnvoyOptions o;
  // Two descriptors: the tenant's, then a shared one whose metadata names another backend.
  o.rate_limits = json::parse(R"([{"actions": [{"request_headers":
      {"header_name": "x-tenant", "descriptor_key": "tenant"}}]},
      {"actions": [{"generic_key": {"descriptor_value": "shared"}}]}])");
  o.route = json::parse(R"({"response_headers_to_add": [
      {"header": {"key": "x-backend",
                  "value": "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:backend)%"}},
      {"header": {"key": "x-weight",
                  "value": "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:route:weight)%"}},
      {"header": {"key": "x-plan",
                  "value": "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:plan)%"}}]})");
  auto s = StartStack(
      "sluiced:\n"
      "  default_algorithm: sliding_window_log\n"
      "domain: e2e\n"
      "descriptors:\n"
      "  - key: tenant\n"
      "    value: acme\n"
      "    metadata:\n"
      "      backend: pool-a\n"
      "      route: {weight: 3}\n"
      "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
      "  - key: tenant\n"
      "    rate_limit: {unit: hour, requests_per_unit: 5}\n"
      "  - key: generic_key\n"
      "    value: shared\n"
      "    metadata: {backend: pool-b, plan: gold}\n"
      "    rate_limit: {unlimited: true}\n",
      o);
  ASSERT_NE(s, nullptr);
  auto ok = s->Get("/", {{"x-tenant", "acme"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  // The first descriptor's backend wins; the second adds its plan.
  EXPECT_EQ(Header(ok, "x-backend"), "pool-a");
  EXPECT_EQ(Header(ok, "x-weight"), "3");
  EXPECT_EQ(Header(ok, "x-plan"), "gold");
  // Another tenant's descriptor has no metadata: the shared one's alone.
  auto other = s->Get("/", {{"x-tenant", "globex"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(Header(other, "x-backend"), "pool-b");
  EXPECT_EQ(Header(other, "x-weight"), "");
  // Over its limit, the tenant's descriptor sends none (the request is denied).
  auto denied = s->Get("/", {{"x-tenant", "acme"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 429);
  EXPECT_EQ(Header(denied, "x-weight"), "");
}

}  // namespace
}  // namespace sluice::testing
