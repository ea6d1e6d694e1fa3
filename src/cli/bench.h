// Internal: the load generator behind `sluice bench`.
//
// N concurrent callers issue decisions against a store, closed loop (each caller
// issues its next decision when the previous one completes), over K keys, for a
// duration or a number of requests. Against a remote store the callers are
// outstanding RedisStore::RunAsync calls re-issued from their completion (no
// thread per caller); otherwise, or with the Limiter API, each caller is a thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/clock.h"
#include "sluice/policy.h"
#include "sluice/redis_store.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::cli {

// Latencies in nanoseconds, log-linear buckets (32 per power of two: about 3%
// resolution), safe to record from many threads at once.
class LatencyHistogram {
 public:
  static constexpr int kSubBits = 5;
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;

  void Record(std::uint64_t ns);
  // A copy of the counts (for a consistent view while others record).
  std::vector<std::uint64_t> Snapshot() const;
  std::uint64_t max() const { return max_.load(std::memory_order_relaxed); }

  static int Index(std::uint64_t ns);
  // The middle of bucket `i`'s range.
  static std::uint64_t Value(int i);
  // The `q` quantile (0..1) of `counts` (as from Snapshot, or a difference of two);
  // 0 when empty.
  static std::uint64_t Quantile(const std::vector<std::uint64_t>& counts, double q);

 private:
  std::array<std::atomic<std::uint64_t>, kBuckets> counts_{};
  std::atomic<std::uint64_t> max_{0};
};

enum class BenchApi {
  kStore,    // Store::RunAsync (remote) or Store::Run from threads (memory)
  kLimiter,  // sluice::Limiter::Acquire from one thread per caller (deny cache applies)
};

struct BenchConfig {
  std::shared_ptr<Store> store;
  std::shared_ptr<RedisStore> redis;  // set when `store` is Redis, for its call counter
  Policy policy;
  std::string prefix = "sluice";
  std::uint64_t cost = 1;
  // Keys "bench:000000000000" .. ; 1 is a single hot key.
  std::uint64_t keys = 10000;
  int concurrency = 64;
  // Stop after `requests` decisions if > 0, else after `duration`.
  std::uint64_t requests = 0;
  Micros duration = 5'000'000;
  BenchApi api = BenchApi::kStore;
  // kLimiter: LimiterOptions::deny_cache.
  bool deny_cache = true;
  // Decisions per second over all callers, paced (threads only); 0: as fast as possible.
  double target_rate = 0;
  std::uint64_t seed = 1;
  // Reservations (issue #12 item 2): StoreCheck::max_wait of every decision (--api
  // limiter: Limiter::Reserve, without waiting). 0: plain decisions.
  Micros max_wait = 0;
};

struct BenchProgress {
  double elapsed_s = 0;
  std::uint64_t decisions = 0;
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t errors = 0;
  double interval_rate = 0;        // decisions/s since the previous report
  std::uint64_t interval_p50 = 0;  // ns, over the decisions since the previous report
  std::uint64_t interval_p99 = 0;
};

struct BenchResult {
  std::string engine;  // "async" or "threads"
  double elapsed_s = 0;
  std::uint64_t decisions = 0;  // completed, including errors
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  // Failed decisions by ErrorCode (index = static_cast<int>(code)).
  std::array<std::uint64_t, 8> errors{};
  std::uint64_t error_total = 0;
  // Latency per decision, ns.
  std::uint64_t p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
  double mean = 0;
  // Redis: EVALSHA calls the store sent during the run (RedisStoreStats: calls, with
  // the coalesced ones counted once per script call).
  std::uint64_t store_calls = 0;
  bool has_store_calls = false;
  // kLimiter: decisions answered by the local deny cache.
  std::uint64_t deny_cache_hits = 0;
  double rate() const { return elapsed_s > 0 ? static_cast<double>(decisions) / elapsed_s : 0; }
};

// "bench:" followed by `i` zero-padded to 12 digits (the caller key, as
// redis-benchmark's __rand_int__ writes numbers).
std::string BenchKey(std::uint64_t i);

// Runs the load. `on_progress` (may be empty) is called from the calling thread every
// `progress_interval`. Fails only if the configuration is invalid.
Result<BenchResult> RunBench(const BenchConfig& config,
                             const std::function<void(const BenchProgress&)>& on_progress,
                             Micros progress_interval = 1'000'000);

}  // namespace sluice::cli
