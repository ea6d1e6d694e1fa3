// Prometheus counters and histograms for sluiced, rendered in the text exposition format.
// Counters are monotonic for the life of the process (they survive config reloads).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "sluice/clock.h"
#include "sluice/limiter.h"

namespace sluice::service {

class TopKeys;

// Decisions about one descriptor of one domain. Pointers handed out stay valid.
struct DescriptorCounters {
  std::atomic<std::uint64_t> ok{0};
  std::atomic<std::uint64_t> over_limit{0};
  std::atomic<std::uint64_t> near_limit{0};
  std::atomic<std::uint64_t> shadow_over_limit{0};
  // quota_mode limits over their limit (answered OK).
  std::atomic<std::uint64_t> quota_over_limit{0};
  std::atomic<std::uint64_t> unlimited{0};
  // Decided by the limit's failure mode because the in-process store was at its key
  // cap (not the limit's own answer: neither "ok" nor "over_limit").
  std::atomic<std::uint64_t> key_cap{0};
  // The rule's top limited keys (service/admin_top_keys.h), made at its first denial.
  std::atomic<TopKeys*> top{nullptr};
  DescriptorCounters() = default;
  DescriptorCounters(const DescriptorCounters&) = delete;
  DescriptorCounters& operator=(const DescriptorCounters&) = delete;
  ~DescriptorCounters();
};

// What the Rate Limit Quota Service (service/rlqs_session.h) did for buckets: per bucket
// id (Metrics::RlqsBucket), and summed over every bucket in RlqsCounters. Each slice taken
// is also a decision of the bucket's descriptor (DescriptorCounters).
struct RlqsBucketCounters {
  enum Action : int { kTokenBucket = 0, kDenyAll = 1, kAllowAll = 2, kAbandon = 3 };
  std::atomic<std::uint64_t> reports{0};  // usage reports
  std::atomic<std::uint64_t> reported_allowed{0};
  std::atomic<std::uint64_t> reported_denied{0};
  std::atomic<std::uint64_t> granted_units{0};
  std::atomic<std::uint64_t> refunded_units{0};  // given back to the store, unused
  std::atomic<std::uint64_t> silences{0};        // settled after Envoy stopped reporting
  std::atomic<std::uint64_t> assignments[4] = {};
};

// The Rate Limit Quota Service's figures over every stream: its streams, and every
// bucket's figures summed.
struct RlqsCounters : RlqsBucketCounters {
  std::atomic<std::uint64_t> streams_opened{0};
  std::atomic<std::uint64_t> streams_closed{0};
  std::atomic<std::uint64_t> stream_errors{0};
};

// The engine's figures at one scrape: its Decider's counters, the in-process stores'
// keys, the config in use.
struct EngineSeries {
  LimiterStats limiter;
  std::size_t deny_cache_bytes = 0;
  // The embedded store (memory://): present, its keys and its cap.
  bool embedded = false;
  std::size_t embedded_keys = 0;
  std::size_t embedded_max_keys = 0;
  std::size_t fallback_keys = 0;
  std::size_t fallback_max_keys = 0;
  std::uint64_t key_cap_refusals = 0;
  std::uint64_t generation = 0;
  std::size_t rules = 0;
};

// Where a request came in.
// kPermit: /v1/acquire, /v1/release and /v1/extend (concurrency limits, issue #12).
// kReport: POST /v1/report (usage charged after the fact, issue #21).
enum class Api : int { kGrpc = 0, kJson = 1, kCheck = 2, kNginx = 3, kPermit = 4, kReport = 5 };
// How a request ended.
enum class RequestOutcome : int { kOk = 0, kOverLimit = 1, kInvalid = 2, kError = 3 };

class Metrics {
 public:
  // Upper bound on (domain, descriptor) series; later ones share the series
  // descriptor="_overflow_" so a flood of detailed_metric values cannot exhaust memory.
  static constexpr std::size_t kMaxSeries = 10000;

  DescriptorCounters* Descriptor(std::string_view domain, std::string_view descriptor);
  void CountRequest(Api api, RequestOutcome outcome);
  void CountUnknownDomain() { unknown_domain_.fetch_add(1, std::memory_order_relaxed); }
  void CountReload(bool ok) { (ok ? reload_ok_ : reload_failed_).fetch_add(1); }
  RlqsCounters& rlqs() { return rlqs_; }
  // The figures of bucket id `bucket` (its key=value pairs, for reading) in `domain`,
  // made at first use. Pointers handed out stay valid. Past kMaxSeries bucket ids, later
  // ones share the series bucket="_overflow_".
  RlqsBucketCounters* RlqsBucket(std::string_view domain, std::string_view bucket);
  // Records one store call's latency.
  void ObserveStoreLatency(Micros us);
  // Store calls timed so far and their total latency (the admin console's store health).
  std::uint64_t store_calls() const { return latency_count_.load(std::memory_order_relaxed); }
  std::uint64_t store_latency_sum_us() const {
    return latency_sum_us_.load(std::memory_order_relaxed);
  }

  // Appends every series this object owns to `out`.
  void Render(std::string& out) const;
  // The same, then the engine's series (decider counters, store gauges, config): every
  // sluiced series, rendered here and nowhere else.
  void Render(std::string& out, const EngineSeries& engine) const;

 private:
  void RenderRlqs(std::string& out) const;
  // The series `id` of `map` (under mu_), made at first use; past kMaxSeries series, the
  // one `overflow_id` names.
  template <class T>
  static T* Series(std::unordered_map<std::string, std::unique_ptr<T>>& map, std::string id,
                   std::string overflow_id);

  static constexpr int kBuckets = 14;
  static constexpr Micros kBucketBoundsUs[kBuckets] = {
      10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000};

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<DescriptorCounters>> series_;
  std::atomic<std::uint64_t> requests_[6][4] = {};
  std::atomic<std::uint64_t> unknown_domain_{0};
  std::atomic<std::uint64_t> reload_ok_{0}, reload_failed_{0};
  std::atomic<std::uint64_t> latency_buckets_[kBuckets + 1] = {};
  std::atomic<std::uint64_t> latency_sum_us_{0};
  std::atomic<std::uint64_t> latency_count_{0};
  RlqsCounters rlqs_;
  std::unordered_map<std::string, std::unique_ptr<RlqsBucketCounters>> rlqs_buckets_;
};

// Appends one sample line, `name{labels} v` (no braces when `labels` is empty).
void AppendMetricLine(std::string& out, std::string_view name, std::string_view labels,
                      std::uint64_t v);

// Escapes a Prometheus label value (backslash, double quote, newline) and replaces each
// byte that is not part of valid UTF-8 with U+FFFD, so a scrape always parses.
std::string EscapeLabel(std::string_view v);

}  // namespace sluice::service
