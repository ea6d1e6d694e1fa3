// Loading and validating sluiced's YAML: envoyproxy/ratelimit's format, sluice's fields,
// and FILE:LINE errors for everything wrong.
#include "service/config.h"

#include <gtest/gtest.h>

namespace sluice::service {
namespace {

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseConfig(yaml, "test.yaml");
  EXPECT_FALSE(c.ok()) << "expected an error for:\n" << yaml;
  return c.ok() ? "" : c.status().message();
}

TEST(Config, EnvoyRatelimitFormat) {
  auto c = ParseConfig(R"(
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
    shadow_mode: true
  - key: remote_address
    detailed_metric: true
    descriptors:
      - key: path
        rate_limit:
          name: by_path
          replaces:
            - name: other
          unit: MINUTE
          requests_per_unit: 10
  - key: internal
    rate_limit:
      unlimited: true
)",
                       "envoy.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->domains.size(), 1u);
  const DomainSpec& d = c->domains[0];
  EXPECT_EQ(d.domain, "mongo_cps");
  ASSERT_EQ(d.descriptors.size(), 4u);
  EXPECT_EQ(d.descriptors[0].value, "users");
  EXPECT_TRUE(d.descriptors[0].has_value);
  EXPECT_EQ(d.descriptors[0].rate_limit.unit, Unit::kSecond);
  EXPECT_EQ(d.descriptors[0].rate_limit.requests_per_unit, 500u);
  EXPECT_EQ(d.descriptors[0].rate_limit.algorithm, Algorithm::kFixedWindow);
  EXPECT_TRUE(d.descriptors[1].shadow_mode);
  EXPECT_FALSE(d.descriptors[2].has_value);
  EXPECT_FALSE(d.descriptors[2].has_rate_limit);
  EXPECT_TRUE(d.descriptors[2].detailed_metric);
  const RateLimitSpec& nested = d.descriptors[2].descriptors[0].rate_limit;
  EXPECT_EQ(nested.unit, Unit::kMinute);
  EXPECT_EQ(nested.name, "by_path");
  EXPECT_EQ(nested.replaces, std::vector<std::string>{"other"});
  EXPECT_TRUE(d.descriptors[3].rate_limit.unlimited);
  EXPECT_EQ(c->settings.http, "127.0.0.1:8080");
}

TEST(Config, SluiceFieldsSettingsAndSeveralDomains) {
  auto c = ParseConfig(R"(
domains:
  - domain: a
    descriptors:
      - key: k
        rate_limit: {unit: hour, requests_per_unit: 5, algorithm: gcra, burst: 2,
                     failure_mode: fail_closed, policy: logins}
  - domain: b
    descriptors:
      - key: k
        rate_limit: {unit: day, requests_per_unit: 7}
---
domain: c
descriptors:
  - key: x
    rate_limit: {unit: second, requests_per_unit: 1}
---
sluiced:
  http: 0.0.0.0:9000
  grpc: "[::1]:9001"
  default_algorithm: sliding_window_log
  max_descriptors: 4
  nginx_headers: {X-Forwarded-For: client}
)",
                       "multi.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->domains.size(), 3u);
  const RateLimitSpec& a = c->domains[0].descriptors[0].rate_limit;
  EXPECT_EQ(a.algorithm, Algorithm::kGcra);
  EXPECT_EQ(a.burst, 2u);
  EXPECT_EQ(a.failure_mode, FailureMode::kFailClosed);
  EXPECT_EQ(a.policy, "logins");
  // The settings' default applies wherever the settings appear in the file.
  EXPECT_EQ(c->domains[1].descriptors[0].rate_limit.algorithm, Algorithm::kSlidingWindowLog);
  EXPECT_EQ(c->domains[2].domain, "c");
  EXPECT_EQ(c->settings.http, "0.0.0.0:9000");
  EXPECT_EQ(c->settings.grpc, "[::1]:9001");
  EXPECT_EQ(c->settings.max_descriptors, 4u);
  EXPECT_EQ(c->settings.nginx_headers.size(), 1u);
  EXPECT_EQ(c->settings.nginx_headers.at("X-Forwarded-For"), "client");
}

TEST(Config, UnknownFieldsAreErrorsWithLine) {
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n"),
            "test.yaml:4: unknown field 'rate_limt' in descriptor (allowed: key, value, "
            "rate_limit, descriptors, shadow_mode, detailed_metric)");
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                    "      requests_per_unit: 1\n      burts: 3\n")
                .find("test.yaml:7: unknown field 'burts' in rate_limit"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf("sluiced:\n  htp: 1.2.3.4:5\ndomain: a\n").find("test.yaml:2: unknown field 'htp'"),
      std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\nextra: 1\n").find("test.yaml:2: unknown field 'extra'"),
            std::string::npos);
}

TEST(Config, InvalidYamlNamesTheLine) {
  const std::string e = ErrorOf("domain: a\ndescriptors:\n  - key: k\n    value: [unclosed\n");
  EXPECT_EQ(e.rfind("test.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(Config, BadValuesAreNamed) {
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, "
                    "requests_per_unit: 1}\n")
                .find("test.yaml:4: unit must be second, minute, hour or day (got 'fortnight')"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n")
                .find("test.yaml:4: rate_limit needs requests_per_unit"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: -3}\n")
                .find("requests_per_unit must be a non-negative integer (got '-3')"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 3, algorithm: magic}\n")
                .find("test.yaml:4:"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 3, burst: 9}\n")
                .find("burst applies only to token_bucket and gcra"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, "
                    "unit: second}\n")
                .find("unlimited rate_limit must not set unit"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - value: v\n")
                .find("test.yaml:3: descriptor needs a key"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sluiced:\n  http: nonsense\ndomain: a\n").find("test.yaml:2: http:"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sluiced:\n  max_descriptors: 17\ndomain: a\n").find("at most 16"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sluiced: {}\n").find("no domain is configured"), std::string::npos);
}

TEST(Config, DuplicatesAreErrors) {
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n")
                .find("test.yaml:5: duplicate descriptor 'k_v' (first defined on line 3)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\n---\ndomain: a\n").find("duplicate domain 'a'"), std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 1, policy: p}\n  - key: j\n    rate_limit: {unit: second, "
                    "requests_per_unit: 2, policy: p}\n")
                .find("policy 'p' is defined with different parameters"),
            std::string::npos);
}

// Defect 13: a YAML mapping with the same key twice was accepted, first one winning
// (`requests_per_unit: 5` then `500` gave 5). It is an error naming both lines.
TEST(Config, DuplicateYamlKeysAreErrorsWithLine) {
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                    "      requests_per_unit: 5\n      requests_per_unit: 500\n"),
            "test.yaml:7: duplicate key 'requests_per_unit' (first on line 6)");
  EXPECT_EQ(ErrorOf("domain: a\ndomain: b\n"),
            "test.yaml:2: duplicate key 'domain' (first on line 1)");
  EXPECT_EQ(ErrorOf("sluiced:\n  nginx_headers: {X-A: a, X-A: b}\ndomain: a\n"),
            "test.yaml:2: duplicate key 'X-A' (first on line 2)");
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - {key: k, key: j}\n"),
            "test.yaml:3: duplicate key 'key' (first on line 3)");
}

TEST(Config, LoadConfigReportsMissingFile) {
  auto c = LoadConfig("/nonexistent/sluiced.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/sluiced.yaml: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace sluice::service
