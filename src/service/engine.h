// The decision engine behind every sluiced API: matches a request's descriptors against
// the configured tree (service/rules.h, envoyproxy/ratelimit semantics), decides them in
// one atomic batch through the process's one Decider (limiter/decider.h) on one shared
// Store, and reports per-descriptor statuses.
//
// The configuration is an immutable snapshot swapped atomically on reload; requests in
// flight finish on the snapshot they started with. Counters live in the Store under keys
// made of the domain, the descriptor entries and a policy name derived from the limit's
// parameters, so a reload keeps the state of every limit it does not change.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "limiter/decider.h"
#include "service/config.h"
#include "service/metrics.h"
#include "service/rules.h"
#include "sluice/clock.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::service {

struct DescriptorRequest {
  std::vector<Entry> entries;
  // The caller's limit override (Envoy's RateLimitDescriptor.limit).
  bool has_override = false;
  std::uint32_t override_requests_per_unit = 0;
  int override_unit = 0;  // envoy.type.v3.RateLimitUnit
  // Per-descriptor cost; overrides the request's hits_addend.
  bool has_hits_addend = false;
  std::uint64_t hits_addend = 0;
};

struct RateLimitRequest {
  std::string_view domain;
  std::vector<DescriptorRequest> descriptors;
  // Cost for every descriptor; 0 means 1.
  std::uint32_t hits_addend = 0;
};

enum class Code : int { kUnknown = 0, kOk = 1, kOverLimit = 2 };

struct DescriptorStatus {
  Code code = Code::kOk;
  // False when no limit applied (no match, unlimited, replaced, unknown domain).
  bool has_limit = false;
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::kUnknown;
  std::string name;
  std::uint32_t limit_remaining = 0;
  // What the headers call the limit: the policy's capacity (requests_per_unit for the
  // window algorithms, the burst for token_bucket/gcra), and its window.
  std::uint64_t capacity = 0;
  Micros window = 0;
  Micros duration_until_reset = 0;
  Micros retry_after = 0;
  // A concurrency limit (issue #12): requests_per_unit and capacity are its most permits
  // held at once, limit_remaining its free permits, window its lease; unit is unknown.
  bool concurrency = false;
  // A descriptor with several limits (`rate_limits`): each one's status, in list order
  // (replaced ones left out); the fields above are then the binding one's (a denial
  // with the longest wait, else the least remaining). Empty for a single limit.
  std::vector<DescriptorStatus> limits;
};

struct RateLimitResponse {
  Code overall_code = Code::kOk;
  std::vector<DescriptorStatus> statuses;
  // Headers for the client (x-ratelimit-*, retry-after), when enabled.
  std::vector<std::pair<std::string, std::string>> response_headers;
};

// --- concurrency limits (issue #12): /v1/acquire, /v1/release, /v1/extend ---
// The answer to AcquireAsync / PermitAsync.
struct PermitResponse {
  // Acquire: every descriptor's status, as ShouldRateLimit reports it (a concurrency
  // limit's remaining is its free permits, its retry_after the time until the earliest
  // held permit expires).
  RateLimitResponse rate;
  // Acquire, when allowed: the permit token to release or extend with (its id and the
  // request's descriptors, so that a release needs nothing else).
  std::string permit;
  // Acquire and extend: the shortest lease of the concurrency limits, i.e. how long the
  // permit lives from now unless released or extended.
  Micros lease = 0;
};

// A permit token: "<permit id>.<domain and descriptors, base64url>". Opaque to clients.
std::string EncodePermitToken(std::string_view id, const RateLimitRequest& request);
// Parses a token into its id and a request (views into `storage`, which it fills).
// InvalidArgument naming what is wrong ("permit ... is not a token from /v1/acquire").
Status DecodePermitToken(std::string_view token, std::string* id, std::string* storage,
                         RateLimitRequest* request);

// The engine's decision counters (its one Decider's) and the config in use.
struct EngineStats {
  LimiterStats limiter;
  // Bytes the process-wide deny cache reserves: fixed at Create, whatever the number
  // of rules or caller overrides.
  std::size_t deny_cache_bytes = 0;
  std::uint64_t generation = 0;
  std::size_t domains = 0;
  std::size_t rules = 0;
};

class Engine {
 public:
  struct Options {
    // Shared by every limiter. Required.
    std::shared_ptr<Store> store;
    // Default: SteadyEpochClock.
    std::shared_ptr<const Clock> clock;
    // Byte budget of the one deny cache of the process (used with remote stores).
    std::size_t deny_cache_bytes = std::size_t{4} << 20;
    // Key cap of the local fallback's in-process store (Settings::max_keys).
    std::size_t fallback_max_keys = std::size_t{1} << 22;
  };

  // Compiles `config` into the first snapshot. Errors name the rule (FILE:LINE).
  static Result<std::unique_ptr<Engine>> Create(const Config& config, Options options);
  ~Engine();

  // Compiles `config` and swaps it in atomically; on error the old snapshot stays.
  Status Reload(const Config& config);

  // Decides `request`. InvalidArgument (with a reason) for bad input; never throws.
  // Blocks the calling thread for the store call.
  Status ShouldRateLimit(const RateLimitRequest& request, RateLimitResponse* response);

  // Called once with the outcome of ShouldRateLimitAsync.
  using AsyncDone = std::function<void(const Status& status, RateLimitResponse& response)>;
  // The same decision without blocking the calling thread on the store: `done` runs
  // exactly once, inline (bad input, no store call needed, deny cache) or on the
  // store's I/O thread. `request` needs to live only during this call.
  void ShouldRateLimitAsync(const RateLimitRequest& request, AsyncDone done);

  // --- concurrency limits (issue #12) ---
  using PermitDone = std::function<void(const Status& status, PermitResponse& response)>;
  // Takes a permit from every concurrency limit the request's descriptors match, and
  // decides their rate limits, in one atomic batch (all pass and are taken, or nothing
  // is). `done` runs exactly once (inline or on the store's thread). Errors:
  // InvalidArgument as ShouldRateLimit, or when no concurrency limit matches.
  void AcquireAsync(const RateLimitRequest& request, PermitDone done);
  // Releases (StoreOp::kRelease) or extends (kExtend) the permit `token` from
  // AcquireAsync, under every concurrency limit its descriptors match in the current
  // configuration (rate limits are left alone: nothing is refunded). Errors:
  // InvalidArgument for a malformed token; NotFound when no limit holds the permit
  // (unknown, released already, expired after its lease, or the limit is gone from the
  // configuration); store errors as is.
  void PermitAsync(StoreOp op, std::string_view token, PermitDone done);

  // The settings of the current snapshot.
  Settings settings() const;
  // The same without a copy; keeps that snapshot's settings alive.
  std::shared_ptr<const Settings> settings_ptr() const;
  Metrics& metrics() { return *metrics_; }
  EngineStats Stats() const;
  // Prometheus text of every sluiced series.
  std::string RenderMetrics() const;
  // The rules of the current config, one per line (GET /rlconfig; RuleSet::Dump).
  std::string DumpConfig() const;

  struct Snapshot;
  struct Prepared;

 private:
  Engine() = default;
  Result<std::shared_ptr<Snapshot>> Compile(const Config& config);
  // Validates and matches `request` into `p`. `*decide` false: `response` is complete
  // without a store call (unknown domain, nothing limited).
  // `permit_op`/`permit_id`: null for a rate decision (a concurrency limit matched is then
  // an InvalidArgument: these APIs have no release); else the permit operation, which
  // checks only the concurrency limits for a release or an extend.
  Status Prepare(const RateLimitRequest& request, Prepared& p, RateLimitResponse* response,
                 bool* decide, const StoreOp* permit_op = nullptr, std::string_view permit_id = {});
  // Statuses, metrics and headers from the decider's answer.
  void Finish(const Prepared& p, std::span<const Decision> decisions,
              RateLimitResponse* response) const;

  std::shared_ptr<Store> store_;
  bool store_remote_ = false;
  // The embedded store when the engine decides on one (memory://), else null. Such a
  // store fails a check only at its key cap: a decision made by a failure mode then
  // means "at the key cap", never "store unreachable".
  std::shared_ptr<MemoryStore> embedded_;
  // Refusals at the key cap, and when the last key_cap_reached line was logged.
  std::atomic<std::uint64_t> key_cap_refusals_{0};
  std::atomic<std::uint64_t> key_cap_logged_refusals_{0};
  std::atomic<std::int64_t> key_cap_logged_at_{0};
  std::size_t max_keys_ = 0;  // the embedded store's cap, for logs and /metrics
  void OnKeyCap();
  std::shared_ptr<const Clock> clock_;
  std::shared_ptr<Metrics> metrics_;
  // One per process: every rule and override is decided through it.
  std::unique_ptr<decide::Decider> decider_;
  std::shared_ptr<Snapshot> snapshot_;  // accessed with std::atomic_load/store
  std::atomic<std::uint64_t> generation_{0};
};

}  // namespace sluice::service
