// The decision engine behind every sluiced API: matches a request's descriptors against
// the configured tree (service/rules.h, envoyproxy/ratelimit semantics), decides them in
// one atomic batch through the process's one Decider (decide/decider.h) on one shared
// Store, and reports per-descriptor statuses.
//
// The configuration is an immutable snapshot swapped atomically on reload; requests in
// flight finish on the snapshot they started with. Counters live in the Store under keys
// made of the domain, the descriptor entries and a policy name derived from the limit's
// parameters, so a reload keeps the state of every limit it does not change.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "decide/decider.h"
#include "service/config.h"
#include "service/metrics.h"
#include "service/permit_token.h"
#include "service/plan.h"
#include "service/request.h"
#include "service/rules.h"
#include "sluice/clock.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::service {

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
    // Count each rule's denied keys in its top limited keys (service/admin_top_keys.h).
    bool top_keys = true;
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

  // Gives back `units` (1..) that ShouldRateLimitAsync charged for descriptor `d` of
  // `domain` (the RLQS's unused quota, docs/rlqs.md): StoreOp::kRefund of the units, at
  // most each limit's capacity, to every enforced limit the descriptor matches now, and
  // their cached denials dropped. `done` runs once with the units given back (0 when
  // nothing matches or the refund failed: the units then stay taken), inline or on the
  // store's thread.
  void RefundAsync(std::string_view domain, const DescriptorRequest& d, std::uint64_t units,
                   std::function<void(std::uint64_t refunded)> done);

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

  // --- the admin listener (issue #24, service/admin_api.h) ---
  // The rules of the current snapshot (the pointer keeps them alive) and its generation.
  std::shared_ptr<const RuleSet> rules(std::uint64_t* generation = nullptr) const;
  // Runs `checks` on the store at the engine clock's now, past the decision layer (no
  // deny cache, lease or failure mode; nothing counted): with cost 0, what the store
  // holds for each key. Store errors as is.
  Status PeekStore(std::span<const StoreCheck> checks, std::span<Decision> out);
  // Forgets `key` under `rule`'s limit: the store's state, the local fallback's, the
  // deny cache's and this process's lease of it.
  Status ResetKey(const Rule& rule, std::string_view key);
  const Clock& clock() const { return *clock_; }

  struct Snapshot;
  struct Prepared;

 private:
  Engine() = default;
  Result<std::shared_ptr<Snapshot>> Compile(const Config& config);
  // Plans `request` (service/plan.h) into `p` on the current snapshot and resets
  // `response`. `*decide` false: `response` is complete without a store call (unknown
  // domain, nothing limited).
  Status Prepare(const RateLimitRequest& request, Prepared& p, RateLimitResponse* response,
                 bool* decide, const PlanOp& op);
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
  bool top_keys_ = true;
  // RefundAsync calls the store has not answered yet: the destructor waits for them
  // (their answers use the decider and the metrics).
  std::mutex refunds_mu_;
  std::condition_variable refunds_cv_;
  int refunds_in_flight_ = 0;
};

}  // namespace sluice::service
