// sluiced's configuration: the YAML format of envoyproxy/ratelimit (domain, nested
// descriptors, rate_limit) plus sluice's own fields, loaded and validated in one go.
// Errors carry FILE:LINE of the offending node. See docs/sluiced.md for the format.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "service/rlqs_config.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice::service {

// The time units of envoyproxy/ratelimit, with the numbers Envoy's RateLimit.Unit uses
// (WEEK is 7 in newer Envoy APIs). A month is 30 days and a year 365, as in
// envoyproxy/ratelimit: fixed lengths, not calendar ones.
enum class Unit : int {
  kUnknown = 0,
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,
  kYear = 6,
  kWeek = 7
};

// "second", "minute", "hour", "day", "month", "year", "week".
const char* UnitName(Unit u);
// The unit's length in microseconds (0 for kUnknown).
Micros UnitMicros(Unit u);
// True for a known unit number (1-7).
bool ValidUnit(int unit);

// A `rate_limit:` block.
struct RateLimitSpec {
  bool unlimited = false;
  Unit unit = Unit::kUnknown;
  std::uint32_t requests_per_unit = 0;
  // `unit_multiplier`: the window is this many units (e.g. 30 with `second`).
  std::uint32_t unit_multiplier = 1;
  // `name`: reported in responses (current_limit.name) and used by `replaces`.
  std::string name;
  // Names of limits this one replaces when both match one request.
  std::vector<std::string> replaces;
  // sluice fields. The policy's algorithm/burst/failure mode default to the settings'.
  Algorithm algorithm = Algorithm::kFixedWindow;
  std::uint64_t burst = 0;
  FailureMode failure_mode = FailureMode::kFailOpen;
  std::uint32_t fallback_divisor = 1;
  // `lease`, `lease_validity`: hot-key leases (Policy::lease); 0 is off / window / 10.
  std::uint64_t lease = 0;
  Micros lease_validity = 0;
  // `block_for`: once over the limit, deny the key for this long (Policy::block_for);
  // 0 is off.
  Micros block_for = 0;
  // --- concurrency limits (issue #12) ---
  // `concurrency: N`: a concurrency limit (Algorithm::kConcurrency): at most N permits held
  // at once per counter, taken with POST /v1/acquire and given back with /v1/release. 0:
  // a rate limit. With `concurrency`, `lease` is a duration (`30s`): how long a permit
  // lives unless released or extended; it is kept here, not in `lease` above.
  std::uint64_t concurrency = 0;
  Micros permit_lease = 0;
  // `policy`: the sluice policy name (store keys, metrics). Empty: derived from the
  // parameters, so an unchanged limit keeps its counters across reloads.
  std::string policy;
  // `on_change: reset | proportional | as_is` (carry-over, Policy::on_change). Set:
  // the policy name leaves out the rate, window and burst, so that a changed limit
  // keeps the key's state and converts it by this mode.
  std::optional<OnChange> on_change;
  int line = 0;
};

// One `descriptors:` item.
struct DescriptorSpec {
  std::string key;
  // Empty with has_value=false: matches any value of `key` (one counter per value).
  // A value ending in '*' matches every value with that prefix.
  std::string value;
  bool has_value = false;
  bool has_rate_limit = false;
  RateLimitSpec rate_limit;
  // `rate_limits:` (sluice): several limits on this descriptor, all enforced at once (a
  // request passes only when every one has room, and then charges every one). Exclusive
  // with `rate_limit`; never unlimited.
  std::vector<RateLimitSpec> rate_limits;
  bool shadow_mode = false;
  bool detailed_metric = false;
  // `quota_mode`: over the limit is reported (metrics, status) but answered OK.
  bool quota_mode = false;
  // `share_threshold`: every value matching this wildcard value shares one counter
  // (default: one counter per value).
  bool share_threshold = false;
  // `value_to_metric`: the request's value joins this descriptor's metric label.
  bool value_to_metric = false;
  // `metadata` (a mapping) as JSON object text; empty when not set. Returned to Envoy as
  // the response's dynamic metadata while a request's descriptor that lands here is
  // under its limit.
  std::string metadata;
  std::vector<DescriptorSpec> descriptors;
  int line = 0;
};

// The sluice Policy a `rate_limit` block makes, unnamed and with shadow off: the one
// conversion from a config rule to a Policy (the loader validates it, the rule set
// names it). A concurrency limit's window is its permit lease.
Policy PolicyOf(const RateLimitSpec& s);

// The limits of a descriptor: its `rate_limit`, or each of its `rate_limits`, or none.
std::vector<const RateLimitSpec*> LimitsOf(const DescriptorSpec& d);

// At most this many limits in one `rate_limits` list (and per request: one atomic
// decision takes at most 16 checks).
inline constexpr std::size_t kMaxLimitsPerDescriptor = 16;

struct DomainSpec {
  std::string domain;
  std::vector<DescriptorSpec> descriptors;
  int line = 0;
};

// The `sluiced:` block; every field can also be set on the command line.
struct Settings {
  std::string http = "127.0.0.1:8080";
  std::string grpc = "127.0.0.1:8081";
  // The admin listener (docs/sluiced.md "Admin API and console"): ADDR:PORT, empty = off;
  // its bearer token file; public_rlconfig keeps GET /rlconfig on `http` too.
  std::string admin;
  std::string admin_token_file;
  bool public_rlconfig = false;
  // Empty or "memory://": the embedded in-process store. redis:// or unix://: Redis.
  std::string redis;
  std::size_t max_body_bytes = 64 * 1024;
  // Descriptors per request; at most 16 (one atomic multi-limit decision).
  std::size_t max_descriptors = 16;
  // Entries per descriptor.
  std::size_t max_entries = 16;
  Algorithm default_algorithm = Algorithm::kFixedWindow;
  FailureMode default_failure_mode = FailureMode::kFailOpen;
  // Every limit in shadow mode: decide, report and count, but always answer OK.
  bool shadow_mode = false;
  // Rate-limit headers in responses (HTTP answers, gRPC response_headers_to_add).
  // YAML: true (= x_ratelimit), false (= none) or one of the names below.
  enum class Headers {
    kNone,
    // X-RateLimit-Limit / -Remaining / -Reset (+ Retry-After when over), limit followed
    // by every descriptor's quota policy as Envoy's draft-03 headers do.
    kXRateLimit,
    // The same without the X- prefix: RateLimit-Limit / -Remaining / -Reset.
    kRateLimit,
    // IETF draft-ietf-httpapi-ratelimit-headers-10: RateLimit-Policy and RateLimit,
    // one item per limited descriptor.
    kDraft10,
  };
  Headers response_headers = Headers::kXRateLimit;
  // A decision with less than (1 - ratio) of the limit left counts as "near limit".
  double near_limit_ratio = 0.8;
  // How often the config file is checked for changes (0 disables polling; SIGHUP works).
  Micros reload_poll = 1'000'000;
  // HTTP I/O threads (`http_io_threads`; 0: one per CPU core). `--http-io-threads` wins.
  std::size_t http_io_threads = 0;
  // Key cap of the in-process store: the embedded store (memory://), or with Redis the
  // local fallback's store. At the cap a new key is decided by its limit's failure mode.
  std::size_t max_keys = std::size_t{1} << 22;
  // nginx auth_request: request header -> descriptor key; every header present in a
  // request becomes one descriptor [{key, header value}].
  std::map<std::string, std::string> nginx_headers = {{"X-Real-IP", "remote_address"},
                                                      {"X-Api-Key", "api_key"}};
  // "debug", "info", "warn", "error".
  std::string log_level = "info";
  // The Rate Limit Quota Service (docs/rlqs.md).
  RlqsSettings rlqs;
};

struct Config {
  std::string file;
  Settings settings;
  std::vector<DomainSpec> domains;
};

// Parses `text` (one or more YAML documents) as if read from `file`. Every error names
// FILE:LINE and what is wrong; unknown fields are errors.
Result<Config> ParseConfig(const std::string& text, const std::string& file);

// Reads and parses `file`.
Result<Config> LoadConfig(const std::string& file);

// Watches a config file for changes that are complete. Editors and deploy tools often
// write a file in place in several steps; a reload between two steps would load a
// half-written config (which may well parse). A change is handed out only once the
// file's bytes have stayed the same for `settle` and they parse; the caller keeps its
// running config otherwise. Not thread-safe (one poller).
class ConfigFileWatcher {
 public:
  // The file's current content counts as loaded.
  ConfigFileWatcher(std::string file, Micros settle);

  // Called at each poll with a monotonic `now`. Returns a parsed config when the file
  // changed since the last config handed out and its content has not changed for
  // `settle`; an error when such stable content does not parse (reported once per
  // content); nullopt-like NotFound when there is nothing to load yet.
  Result<Config> Poll(Micros now);

  // Marks the file's current content as loaded (after a reload done another way, e.g.
  // SIGHUP).
  void MarkLoaded();

 private:
  std::string file_;
  Micros settle_;
  std::string loaded_;   // content of the last config handed out
  std::string pending_;  // content seen changed, waiting to settle
  Micros pending_since_ = 0;
  bool has_pending_ = false;
  bool pending_reported_ = false;
};

// Checks "ADDR:PORT" ("[::1]:8080" for IPv6); port 0 means "pick a free one".
Status ValidateListenAddress(const std::string& addr);

}  // namespace sluice::service
