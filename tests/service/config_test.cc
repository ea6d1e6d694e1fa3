// Loading and validating sluiced's YAML: envoyproxy/ratelimit's format, sluice's fields,
// and FILE:LINE errors for everything wrong.
#include "service/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "service/daemon.h"

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

// Carry-over (issue #12 item 4): `on_change` per rate_limit; a bad value or a mode the
// algorithm cannot take is an error at its line.
TEST(Config, OnChangeIsParsedAndBadValuesNameTheLine) {
  const std::string head =
      "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
      "      requests_per_unit: 1\n";
  auto c = ParseConfig(head + "      on_change: proportional\n", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->domains[0].descriptors[0].rate_limit.on_change.has_value());
  EXPECT_EQ(*c->domains[0].descriptors[0].rate_limit.on_change, OnChange::kProportional);
  auto plain = ParseConfig(head, "test.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->domains[0].descriptors[0].rate_limit.on_change.has_value());
  EXPECT_EQ(ErrorOf(head + "      on_change: keep\n"),
            "test.yaml:7: unknown on_change mode 'keep' (expected reset, proportional or as_is)");
  const std::string log = ErrorOf(head +
                                  "      algorithm: sliding_window_log\n"
                                  "      on_change: reset\n");
  EXPECT_EQ(log.rfind("test.yaml:", 0), 0u) << log;
  EXPECT_NE(log.find("on_change reset does not apply to sliding_window_log"), std::string::npos)
      << log;
}

// `overage` and `max_debt` (issue #21): parsed into the rule's Policy; a bad value, a
// max_debt without overage: charge, and the combinations the policy refuses name the line.
TEST(Config, OverageAndMaxDebtAreParsedAndBadValuesNameTheLine) {
  const std::string head =
      "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n"
      "      requests_per_unit: 1000\n";
  auto c = ParseConfig(head + "      overage: charge\n      max_debt: 5000\n", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const RateLimitSpec& r = c->domains[0].descriptors[0].rate_limit;
  EXPECT_EQ(r.overage, Overage::kCharge);
  EXPECT_EQ(r.max_debt, 5000u);
  const Policy p = PolicyOf(r);
  EXPECT_EQ(p.overage, Overage::kCharge);
  EXPECT_EQ(p.max_debt, 5000u);
  auto drain = ParseConfig(head + "      overage: drain\n", "test.yaml");
  ASSERT_TRUE(drain.ok()) << drain.status().message();
  EXPECT_EQ(PolicyOf(drain->domains[0].descriptors[0].rate_limit).overage, Overage::kDrain);
  auto plain = ParseConfig(head, "test.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(PolicyOf(plain->domains[0].descriptors[0].rate_limit).overage, Overage::kReject);
  const std::string bad = ErrorOf(head + "      overage: borrow\n");
  EXPECT_EQ(bad.rfind("test.yaml:7: ", 0), 0u) << bad;
  EXPECT_NE(bad.find("borrow"), std::string::npos) << bad;
  EXPECT_EQ(ErrorOf(head + "      max_debt: 10\n"),
            "test.yaml:7: max_debt applies only with overage: charge (the debt a key may carry)");
  EXPECT_EQ(ErrorOf(head + "      overage: charge\n      max_debt: -1\n"),
            "test.yaml:8: max_debt must be a non-negative integer (got '-1')");
  // A concurrency limit holds permits, not a cost: overage does not apply.
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n"
                    "      concurrency: 2\n      lease: 30s\n      overage: charge\n"),
            "test.yaml:7: overage does not apply to a concurrency limit (concurrency: N permits "
            "held at once, each for at most lease)");
  // A ban charges nothing.
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n"
                    "      unit: second\n      requests_per_unit: 0\n      overage: charge\n"),
            "test.yaml:7: requests_per_unit: 0 denies every request; overage does not apply");
}

TEST(Config, UnknownFieldsAreErrorsWithLine) {
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n"),
            "test.yaml:4: unknown field 'rate_limt' in descriptor (allowed: key, value, "
            "rate_limit, rate_limits, descriptors, shadow_mode, detailed_metric, quota_mode, "
            "share_threshold, "
            "value_to_metric, metadata)");
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

TEST(Config, SeveralLimitsOnOneDescriptor) {
  auto c = ParseConfig(
      "domain: a\ndescriptors:\n  - key: k\n    rate_limits:\n"
      "      - {unit: second, requests_per_unit: 10}\n"
      "      - {unit: hour, requests_per_unit: 1000, name: hourly, algorithm: "
      "sliding_window_log}\n",
      "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const DescriptorSpec& d = c->domains[0].descriptors[0];
  EXPECT_FALSE(d.has_rate_limit);
  ASSERT_EQ(d.rate_limits.size(), 2u);
  EXPECT_EQ(d.rate_limits[0].requests_per_unit, 10u);
  EXPECT_EQ(d.rate_limits[1].unit, Unit::kHour);
  EXPECT_EQ(d.rate_limits[1].algorithm, Algorithm::kSlidingWindowLog);
  EXPECT_EQ(d.rate_limits[1].line, 6);
  EXPECT_EQ(LimitsOf(d).size(), 2u);

  const std::string head = "domain: a\ndescriptors:\n  - key: k\n";
  EXPECT_EQ(ErrorOf(head + "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                           "    rate_limits: [{unit: hour, requests_per_unit: 5}]\n"),
            "test.yaml:5: a descriptor has either rate_limit or rate_limits, not both");
  EXPECT_EQ(ErrorOf(head + "    rate_limits: []\n"),
            "test.yaml:4: rate_limits must be a non-empty list of rate_limit blocks");
  EXPECT_EQ(ErrorOf(head + "    rate_limits: {unit: hour}\n"),
            "test.yaml:4: rate_limits must be a non-empty list of rate_limit blocks");
  EXPECT_EQ(ErrorOf(head + "    rate_limits:\n      - {unlimited: true}\n"),
            "test.yaml:5: rate_limits items must be limits (unlimited: true makes the others "
            "moot)");
  EXPECT_EQ(ErrorOf(head + "    rate_limits:\n      - {unit: hour, requests_per_unit: 5}\n"
                           "      - {unit: hour, requests_per_unit: 5, colour: red}\n"),
            "test.yaml:6: unknown field 'colour' in rate_limit (allowed: unit, requests_per_unit, "
            "unit_multiplier, unlimited, name, replaces, algorithm, burst, failure_mode, "
            "fallback_divisor, policy, lease, lease_validity, block_for, on_change, concurrency, "
            "overage, max_debt)");
  EXPECT_EQ(ErrorOf(head + "    rate_limits:\n      - {unit: hour, requests_per_unit: 5, name: x}\n"
                           "      - {unit: day, requests_per_unit: 50, name: x}\n"),
            "test.yaml:6: rate_limits: name 'x' is used twice (first on line 5)");
  std::string many = head + "    rate_limits:\n";
  for (int i = 1; i <= 17; ++i) {
    many += "      - {unit: hour, requests_per_unit: " + std::to_string(i) + "}\n";
  }
  EXPECT_EQ(ErrorOf(many), "test.yaml:5: rate_limits has 17 limits (at most 16)");
}

// A policy name shared by two limits with different windows would share counters kept
// for different windows.
TEST(Config, SharedPolicyWithDifferentUnitMultiplierIsRejected) {
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n"
                    "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, policy: p}\n"
                    "  - key: j\n    rate_limit: {unit: second, unit_multiplier: 30, "
                    "requests_per_unit: 5, policy: p}\n")
                .find("policy 'p' is defined with different parameters on line"),
            std::string::npos);
}

// http_threads sized cpp-httplib's thread pool; it meant nothing after the move to an
// event-driven front end and was accepted silently.
TEST(Config, HttpThreadsIsRefusedWithTheReplacement) {
  EXPECT_EQ(ErrorOf("sluiced:\n  log_level: info\n  http_threads: 64\ndomain: a\n"),
            "test.yaml:3: http_threads is no longer supported: the HTTP front end is "
            "event-driven and holds no thread per connection; remove it (http_io_threads or "
            "--http-io-threads sets the I/O threads, one per core by default)");
  auto c = ParseConfig("sluiced:\n  http_io_threads: 2\n  max_keys: 1000\ndomain: a\n", "t");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->settings.http_io_threads, 2u);
  EXPECT_EQ(c->settings.max_keys, 1000u);
  EXPECT_NE(ErrorOf("sluiced:\n  max_keys: 0\ndomain: a\n").find("test.yaml:2: max_keys must be"),
            std::string::npos);
  EXPECT_NE(ErrorOf("sluiced:\n  http_io_threads: 1000\ndomain: a\n").find("test.yaml:2:"),
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
                .find("test.yaml:4: unit must be second, minute, hour, day, week, month or year "
                      "(got 'fortnight')"),
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

// The config fuzzer found a 14-byte file with NUL bytes on which yaml-cpp 0.7 loops
// forever; YAML forbids such control characters, so they are an error naming the line.
TEST(Config, ControlCharactersAreErrorsWithLine) {
  EXPECT_EQ(ErrorOf(std::string(", S=t\0auet\0\0\0\0", 14)),
            "test.yaml:1: control character 0x00 is not allowed in YAML");
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\x07\n"),
            "test.yaml:2: control character 0x07 is not allowed in YAML");
  // Bytes that are not UTF-8 (yaml-cpp 0.7 also loops on some of them).
  EXPECT_EQ(ErrorOf("domain: a\n#\xff\xff\xff\xff x\n"),
            "test.yaml:2: not UTF-8 text (a config file must be UTF-8)");
  // Tabs and CRLF line ends stay allowed.
  auto crlf = ParseConfig("domain: a\r\ndescriptors:\r\n  - key: k\t\r\n", "test.yaml");
  EXPECT_TRUE(crlf.ok()) << crlf.status().ToString();
}

// Defect 12: a config written in place in two steps was loaded half-written (for 400 ms
// every client got 429). The watcher hands out a change only once the bytes have stayed
// the same for the settle time, and only if they parse.
TEST(Config, WatcherNeverHandsOutAHalfWrittenFile) {
  const std::string file = ::testing::TempDir() + "/sluiced_watch_test.yaml";
  auto write = [&](const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
  };
  const std::string full =
      "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
      "requests_per_unit: 500}\n";
  write(full);
  const Micros settle = 1'000'000;
  ConfigFileWatcher w(file, settle);
  Micros now = 1'000'000'000;
  EXPECT_EQ(w.Poll(now).status().code(), ErrorCode::kNotFound);  // unchanged
  // Step one of an in-place write: a prefix that parses (the limit reads 5).
  const std::string half = full.substr(0, full.find("500") + 1) + "}\n";
  ASSERT_TRUE(ParseConfig(half, file).ok());
  write(half);
  EXPECT_EQ(w.Poll(now += 100'000).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(w.Poll(now += 400'000).status().code(), ErrorCode::kNotFound);
  // Step two, before the first one settled.
  const std::string next =
      "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
      "requests_per_unit: 600}\n";
  write(next);
  EXPECT_EQ(w.Poll(now += 400'000).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(w.Poll(now += settle - 1).status().code(), ErrorCode::kNotFound);
  auto c = w.Poll(now += 1);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->domains[0].descriptors[0].rate_limit.requests_per_unit, 600u);
  EXPECT_EQ(w.Poll(now += settle).status().code(), ErrorCode::kNotFound);  // loaded once
  // Stable but invalid: an error once (the caller keeps its config), then quiet.
  write("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n");
  EXPECT_EQ(w.Poll(now += 1).status().code(), ErrorCode::kNotFound);
  auto bad = w.Poll(now += settle);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(file + ":4:"), std::string::npos) << bad.status().message();
  EXPECT_EQ(w.Poll(now += settle).status().code(), ErrorCode::kNotFound);
  // Written back as it was loaded: nothing to do.
  write(next);
  EXPECT_EQ(w.Poll(now += settle).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(w.Poll(now += settle).status().code(), ErrorCode::kNotFound);
  std::remove(file.c_str());
}

// Defect 12 through the daemon: a poll that sees the first step of an in-place write
// must not load it (before, any change of mtime/size was loaded at once).
TEST(Config, DaemonDoesNotLoadAFileTheMomentItChanges) {
  const std::string file = ::testing::TempDir() + "/sluiced_watch_daemon.yaml";
  auto write = [&](const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
  };
  write(
      "sluiced: {reload_poll: 0, log_level: error}\ndomain: a\ndescriptors:\n  - key: k\n"
      "    rate_limit: {unit: second, requests_per_unit: 500}\n");
  DaemonOptions o;
  o.config_file = file;
  o.http = "127.0.0.1:0";
  o.grpc = "127.0.0.1:0";
  auto d = Daemon::Start(o);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const std::uint64_t generation = (*d)->engine().Stats().generation;
  // Step one of two: a prefix that parses, with limit 5.
  write(
      "sluiced: {reload_poll: 0, log_level: error}\ndomain: a\ndescriptors:\n  - key: k\n"
      "    rate_limit: {unit: second, requests_per_unit: 5}\n");
  (*d)->ReloadIfChanged();
  EXPECT_EQ((*d)->engine().Stats().generation, generation);
  // An explicit reload (SIGHUP) still loads at once.
  ASSERT_TRUE((*d)->Reload("test").ok());
  EXPECT_EQ((*d)->engine().Stats().generation, generation + 1);
  (*d)->Shutdown();
  std::remove(file.c_str());
}

// What envoyproxy/ratelimit accepts loads; what it rejects is rejected.
TEST(Config, EnvoyRatelimitParity) {
  auto c = ParseConfig(R"(
domain: a
descriptors:
  - key: k
    rate_limit: {unit: month, requests_per_unit: 10, replaces: [{name: other}]}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 10, name: other}
  - key: d
    rate_limit: {unit: day, requests_per_unit: 10, unit_multiplier: 2}
  - key: f
    value: "files/*"
    share_threshold: true
    value_to_metric: true
    quota_mode: true
    metadata: {anything: [1, 2]}
    rate_limit: {unit: week, requests_per_unit: 1}
)",
                       "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->domains[0].descriptors[0].rate_limit.unit, Unit::kMonth);
  EXPECT_EQ(c->domains[0].descriptors[1].rate_limit.unit, Unit::kYear);
  EXPECT_EQ(c->domains[0].descriptors[2].rate_limit.unit_multiplier, 2u);
  EXPECT_TRUE(c->domains[0].descriptors[3].share_threshold);
  // sluice's policies cap a window at 366 days: a longer one is refused with its reason
  // (envoyproxy/ratelimit would accept it; see docs/sluiced.md).
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, "
                    "requests_per_unit: 1, unit_multiplier: 2}\n")
                .find("window must be at most 366 days"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 1, name: me, replaces: [{name: me}]}\n"),
            "test.yaml:4: rate_limit 'me' replaces itself");
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    share_threshold: true\n")
                .find("share_threshold applies only to a value with '*'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 1, unit_multiplier: 0}\n")
                .find("unit_multiplier must be at least 1"),
            std::string::npos);
  // A tree deeper than a request may be (max_entries) could never match.
  EXPECT_NE(ErrorOf("sluiced: {max_entries: 2}\ndomain: a\ndescriptors:\n  - key: a\n"
                    "    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n")
                .find("test.yaml:8: descriptors are nested more than max_entries (2)"),
            std::string::npos);
}

TEST(Config, LoadConfigReportsMissingFile) {
  auto c = LoadConfig("/nonexistent/sluiced.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/sluiced.yaml: cannot open"), std::string::npos);
}

// Issue #20 item 5: '-5ms', '-1s', '0.5ms' and '0' all failed with "needs a unit". Each
// gets its own reason now, and 0 is accepted where it means "none" (block_for: off).
TEST(Config, DurationsSayWhatIsWrong) {
  const std::string head = "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n";
  const std::string rate = head + "      unit: second\n      requests_per_unit: 1\n";
  EXPECT_EQ(ErrorOf(rate + "      block_for: -1s\n"),
            "test.yaml:7: block_for: duration '-1s' must not be negative");
  EXPECT_EQ(ErrorOf(rate + "      block_for: 0.5ms\n"),
            "test.yaml:7: block_for: duration '0.5ms' must be a whole number of its unit (write "
            "500us)");
  const std::string conc = head + "      concurrency: 2\n";
  EXPECT_EQ(ErrorOf(conc + "      lease: -5ms\n"),
            "test.yaml:6: lease: duration '-5ms' must not be negative (a duration such as 30s)");
  EXPECT_EQ(ErrorOf(conc + "      lease: 0\n"), "test.yaml:6: lease must be more than 0 (got '0')");
  auto c = ParseConfig(rate + "      block_for: 0\n", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->domains[0].descriptors[0].rate_limit.block_for, 0);
  c = ParseConfig(rate + "      block_for: 1.5s\n", "test.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("write 1500ms"), std::string::npos) << c.status().message();
}

// `block_for` (Policy::block_for): a duration; bad values fail with FILE:LINE.
TEST(Config, BlockFor) {
  auto c = ParseConfig(R"(
domain: login
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, block_for: 15m}
)",
                       "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->domains[0].descriptors[0].rate_limit.block_for, 15 * 60 * 1'000'000LL);
  const std::string head = "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n";
  EXPECT_EQ(ErrorOf(head + "      unit: second\n      requests_per_unit: 1\n"
                           "      block_for: soon\n"),
            "test.yaml:7: block_for: duration 'soon' needs a unit: us, ms, s, m/min, h/hour or "
            "d/day");
  EXPECT_EQ(ErrorOf(head + "      unit: second\n      requests_per_unit: 1\n"
                           "      block_for: -5m\n"),
            "test.yaml:7: block_for: duration '-5m' must not be negative");
  EXPECT_EQ(ErrorOf(head + "      unit: second\n      requests_per_unit: 1\n"
                           "      block_for: 400d\n"),
            "test.yaml:7: block_for must be at most 366 days");
  EXPECT_EQ(ErrorOf(head + "      unit: second\n      requests_per_unit: 10\n"
                           "      lease: 2\n      block_for: 1m\n"),
            "test.yaml:5: rate_limit: block_for cannot be combined with lease (a lease decides "
            "locally, without seeing the block)");
}

}  // namespace
}  // namespace sluice::service

namespace sluice::service {
namespace {

// --- concurrency limits (issue #12) ---

TEST(Config, ConcurrencyLimitWithItsLease) {
  auto c = ParseConfig(R"(domain: jobs
descriptors:
  - key: tenant
    rate_limit: {concurrency: 10, lease: 30s, name: in_flight, failure_mode: fail_closed}
  - key: mixed
    rate_limits:
      - {concurrency: 2, lease: 500ms}
      - {unit: second, requests_per_unit: 5, lease: 2}
)",
                       "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const RateLimitSpec& r = c->domains[0].descriptors[0].rate_limit;
  EXPECT_EQ(r.algorithm, Algorithm::kConcurrency);
  EXPECT_EQ(r.concurrency, 10u);
  EXPECT_EQ(r.permit_lease, 30'000'000);
  EXPECT_EQ(r.lease, 0u);  // not a hot-key lease
  EXPECT_EQ(r.failure_mode, FailureMode::kFailClosed);
  const auto& list = c->domains[0].descriptors[1].rate_limits;
  EXPECT_EQ(list[0].permit_lease, 500'000);
  EXPECT_EQ(list[1].lease, 2u);  // a rate limit's lease stays a hot-key lease
}

TEST(Config, BadConcurrencyLimitsNameTheLine) {
  const std::string head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n";
  std::string e = ErrorOf(head + "      concurrency: 10\n      lease: 0s\n");
  EXPECT_NE(e.find("test.yaml:6: lease must be more than 0"), std::string::npos) << e;
  e = ErrorOf(head + "      concurrency: 10\n      lease: -5s\n");
  EXPECT_NE(e.find("test.yaml:6: lease"), std::string::npos) << e;
  e = ErrorOf(head + "      concurrency: 10\n");
  EXPECT_NE(e.find("test.yaml:5: a concurrency limit needs lease"), std::string::npos) << e;
  e = ErrorOf(head + "      concurrency: 0\n      lease: 1s\n");
  EXPECT_NE(e.find("test.yaml:5: concurrency must be at least 1"), std::string::npos) << e;
  e = ErrorOf(head + "      concurrency: -3\n      lease: 1s\n");
  EXPECT_NE(e.find("test.yaml:5: concurrency must be a non-negative integer"), std::string::npos)
      << e;
  e = ErrorOf(head + "      concurrency: 10\n      lease: 1s\n      unit: second\n");
  EXPECT_NE(e.find("test.yaml:7: unit does not apply to a concurrency limit"), std::string::npos)
      << e;
  e = ErrorOf(head + "      concurrency: 10\n      lease: 1s\n      algorithm: gcra\n");
  EXPECT_NE(e.find("test.yaml:7: algorithm does not apply"), std::string::npos) << e;
  // Blocks and limit changes are about a rate's budget: a concurrency limit has none.
  e = ErrorOf(head + "      concurrency: 10\n      lease: 1s\n      block_for: 1m\n");
  EXPECT_NE(e.find("test.yaml:7: block_for does not apply to a concurrency limit"),
            std::string::npos)
      << e;
  e = ErrorOf(head + "      concurrency: 10\n      lease: 1s\n      on_change: proportional\n");
  EXPECT_NE(e.find("test.yaml:7: on_change does not apply to a concurrency limit"),
            std::string::npos)
      << e;
  // A duration as a rate limit's lease: it is a permit lifetime, which needs concurrency.
  e = ErrorOf(head + "      unit: second\n      requests_per_unit: 5\n      lease: 30s\n");
  EXPECT_NE(e.find("test.yaml:7: lease must be a number of units"), std::string::npos) << e;
  EXPECT_NE(e.find("needs concurrency"), std::string::npos) << e;
}

}  // namespace
}  // namespace sluice::service

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "service/launch.h"

namespace sluice::service {
namespace {

// Issue #20 item 5: --check-config printed neither block_for, on_change nor a hot-key
// lease, so a deploy check could not show them.
TEST(ConfigCheck, PrintsBlockForOnChangeAndLeases) {
  char path[] = "/tmp/sluiced-check-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    std::ofstream f(path);
    f << "domain: web\ndescriptors:\n"
         "  - key: user\n"
         "    rate_limit: {unit: minute, requests_per_unit: 5, block_for: 15m}\n"
         "  - key: ip\n"
         "    rate_limit: {unit: minute, requests_per_unit: 100, on_change: proportional, "
         "policy: ip}\n"
         "  - key: hot\n"
         "    rate_limit: {unit: second, requests_per_unit: 1000, lease: 20, "
         "lease_validity: 50ms}\n";
  }
  DaemonOptions o;
  o.config_file = path;
  char* text = nullptr;
  std::size_t size = 0;
  std::FILE* out = ::open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  const int rc = CheckConfig(o, "", out, stderr);
  std::fclose(out);
  const std::string printed(text, size);
  std::free(text);
  ::unlink(path);
  ASSERT_EQ(rc, 0) << printed;
  EXPECT_NE(printed.find("[user] -> 5/minute fixed_window fail_open block_for 15m (line"),
            std::string::npos)
      << printed;
  EXPECT_NE(
      printed.find("[ip] -> 100/minute fixed_window fail_open on_change proportional policy=ip"),
      std::string::npos)
      << printed;
  EXPECT_NE(printed.find("lease 20 (valid 50ms)"), std::string::npos) << printed;
}

}  // namespace
}  // namespace sluice::service
