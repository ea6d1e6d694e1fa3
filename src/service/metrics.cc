// Prometheus text rendering.
#include "service/metrics.h"

#include <vector>

#include "core/utf8.h"
#include "service/admin_top_keys.h"

namespace sluice::service {
namespace {

constexpr const char* kApiNames[] = {"grpc", "json", "check", "nginx", "permit", "report"};
constexpr const char* kOutcomeNames[] = {"ok", "over_limit", "invalid", "error"};

}  // namespace

void AppendMetricLine(std::string& out, std::string_view name, std::string_view labels,
                      std::uint64_t v) {
  out.append(name);
  if (!labels.empty()) {
    out.push_back('{');
    out.append(labels);
    out.push_back('}');
  }
  out.push_back(' ');
  out.append(std::to_string(v));
  out.push_back('\n');
}

std::string EscapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  while (!v.empty()) {
    const char c = v[0];
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
      v.remove_prefix(1);
    } else if (c == '\n') {
      out.append("\\n");
      v.remove_prefix(1);
    } else if (const std::size_t n = core::Utf8SequenceLength(v); n > 0) {
      out.append(v.substr(0, n));
      v.remove_prefix(n);
    } else {
      // Prometheus rejects a whole scrape with one invalid UTF-8 byte: each such byte
      // becomes U+FFFD.
      out.append("\xEF\xBF\xBD");
      v.remove_prefix(1);
    }
  }
  return out;
}

template <class T>
T* Metrics::Series(std::unordered_map<std::string, std::unique_ptr<T>>& map, std::string id,
                   std::string overflow_id) {
  auto it = map.find(id);
  if (it != map.end()) return it->second.get();
  if (map.size() >= kMaxSeries) {
    id = std::move(overflow_id);
    it = map.find(id);
    if (it != map.end()) return it->second.get();
  }
  auto [pos, _] = map.emplace(std::move(id), std::make_unique<T>());
  return pos->second.get();
}

DescriptorCounters* Metrics::Descriptor(std::string_view domain, std::string_view descriptor) {
  const std::string d = "domain=\"" + EscapeLabel(domain) + "\",descriptor=\"";
  std::lock_guard<std::mutex> lock(mu_);
  return Series(series_, d + EscapeLabel(descriptor) + "\"", d + "_overflow_\"");
}

RlqsBucketCounters* Metrics::RlqsBucket(std::string_view domain, std::string_view bucket) {
  const std::string d = "domain=\"" + EscapeLabel(domain) + "\",bucket=\"";
  std::lock_guard<std::mutex> lock(mu_);
  return Series(rlqs_buckets_, d + EscapeLabel(bucket) + "\"", d + "_overflow_\"");
}

void Metrics::CountRequest(Api api, RequestOutcome outcome) {
  requests_[static_cast<int>(api)][static_cast<int>(outcome)].fetch_add(1,
                                                                        std::memory_order_relaxed);
}

void Metrics::ObserveStoreLatency(Micros us) {
  int b = 0;
  while (b < kBuckets && us > kBucketBoundsUs[b]) ++b;
  latency_buckets_[b].fetch_add(1, std::memory_order_relaxed);
  latency_sum_us_.fetch_add(static_cast<std::uint64_t>(us < 0 ? 0 : us), std::memory_order_relaxed);
  latency_count_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// One sample of an RLQS bucket series: its extra label (or none) and its value.
struct RlqsSample {
  const char* label;
  std::uint64_t (*value)(const RlqsBucketCounters&);
};
struct RlqsSeries {
  const char* name;  // after sluiced_rlqs_ (totals) or sluiced_rlqs_bucket_ (per bucket)
  const char* help;
  std::vector<RlqsSample> samples;
};

std::uint64_t Load(const std::atomic<std::uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

// Every bucket figure, rendered once summed and once per bucket id.
const std::vector<RlqsSeries>& RlqsBucketSeries() {
  using C = RlqsBucketCounters;
  static const std::vector<RlqsSeries> series = {
      {"reports_total",
       "Bucket usage reports received.",
       {{nullptr, [](const C& c) { return Load(c.reports); }}}},
      {"reported_requests_total",
       "Requests the data plane reported, by result.",
       {{"result=\"allowed\"", [](const C& c) { return Load(c.reported_allowed); }},
        {"result=\"denied\"", [](const C& c) { return Load(c.reported_denied); }}}},
      {"granted_units_total",
       "Units taken from the store for assignments.",
       {{nullptr, [](const C& c) { return Load(c.granted_units); }}}},
      {"refunded_units_total",
       "Units of assignments given back to the store unused.",
       {{nullptr, [](const C& c) { return Load(c.refunded_units); }}}},
      {"silences_total",
       "Times a bucket was settled because the data plane stopped reporting it on an open "
       "stream.",
       {{nullptr, [](const C& c) { return Load(c.silences); }}}},
      {"assignments_total",
       "Bucket actions sent, by action.",
       {{"action=\"token_bucket\"",
         [](const C& c) { return Load(c.assignments[C::kTokenBucket]); }},
        {"action=\"deny_all\"", [](const C& c) { return Load(c.assignments[C::kDenyAll]); }},
        {"action=\"allow_all\"", [](const C& c) { return Load(c.assignments[C::kAllowAll]); }},
        {"action=\"abandon\"", [](const C& c) { return Load(c.assignments[C::kAbandon]); }}}},
  };
  return series;
}

// Appends `s` of `c` under `name`, each sample with `labels` and its own label.
void AppendRlqsSamples(std::string& out, const std::string& name, const std::string& labels,
                       const RlqsSeries& s, const RlqsBucketCounters& c) {
  for (const RlqsSample& x : s.samples) {
    std::string l = labels;
    if (x.label != nullptr) l += (l.empty() ? "" : ",") + std::string(x.label);
    AppendMetricLine(out, name, l, x.value(c));
  }
}

}  // namespace

void Metrics::RenderRlqs(std::string& out) const {
  const RlqsCounters& r = rlqs_;
  out.append("# HELP sluiced_rlqs_streams Open Rate Limit Quota Service streams.\n");
  out.append("# TYPE sluiced_rlqs_streams gauge\n");
  const std::uint64_t opened = Load(r.streams_opened);
  const std::uint64_t closed = Load(r.streams_closed);
  AppendMetricLine(out, "sluiced_rlqs_streams", "", opened > closed ? opened - closed : 0);
  out.append("# HELP sluiced_rlqs_stream_errors_total RLQS streams ended with an error.\n");
  out.append("# TYPE sluiced_rlqs_stream_errors_total counter\n");
  AppendMetricLine(out, "sluiced_rlqs_stream_errors_total", "", Load(r.stream_errors));
  std::vector<std::pair<std::string, const RlqsBucketCounters*>> buckets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    buckets.reserve(rlqs_buckets_.size());
    for (const auto& [labels, c] : rlqs_buckets_) buckets.emplace_back(labels, c.get());
  }
  for (const RlqsSeries& s : RlqsBucketSeries()) {
    for (const bool per_bucket : {false, true}) {
      const std::string name =
          std::string(per_bucket ? "sluiced_rlqs_bucket_" : "sluiced_rlqs_") + s.name;
      out.append("# HELP " + name + " " + s.help + (per_bucket ? " Per bucket id.\n" : "\n"));
      out.append("# TYPE " + name + " counter\n");
      if (!per_bucket) {
        AppendRlqsSamples(out, name, "", s, r);
      } else {
        for (const auto& [labels, c] : buckets) AppendRlqsSamples(out, name, labels, s, *c);
      }
    }
  }
}

void Metrics::Render(std::string& out) const {
  out.append("# HELP sluiced_requests_total API requests by interface and outcome.\n");
  out.append("# TYPE sluiced_requests_total counter\n");
  for (int a = 0; a < static_cast<int>(std::size(kApiNames)); ++a) {
    for (int o = 0; o < 4; ++o) {
      AppendMetricLine(
          out, "sluiced_requests_total",
          std::string("api=\"") + kApiNames[a] + "\",outcome=\"" + kOutcomeNames[o] + "\"",
          requests_[a][o].load(std::memory_order_relaxed));
    }
  }
  std::vector<std::pair<std::string, const DescriptorCounters*>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows.reserve(series_.size());
    for (const auto& [k, v] : series_) rows.emplace_back(k, v.get());
  }
  out.append(
      "# HELP sluiced_decisions_total Descriptor decisions by domain, descriptor and outcome.\n");
  out.append("# TYPE sluiced_decisions_total counter\n");
  for (const auto& [labels, c] : rows) {
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"ok\"", c->ok.load());
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"over_limit\"",
                     c->over_limit.load());
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"shadow_over_limit\"",
                     c->shadow_over_limit.load());
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"unlimited\"",
                     c->unlimited.load());
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"quota_over_limit\"",
                     c->quota_over_limit.load());
    AppendMetricLine(out, "sluiced_decisions_total", labels + ",outcome=\"key_cap\"",
                     c->key_cap.load());
  }
  out.append(
      "# HELP sluiced_near_limit_total Allowed decisions that used more than near_limit_ratio of "
      "the limit.\n");
  out.append("# TYPE sluiced_near_limit_total counter\n");
  for (const auto& [labels, c] : rows)
    AppendMetricLine(out, "sluiced_near_limit_total", labels, c->near_limit);
  out.append(
      "# HELP sluiced_shadow_over_limit_total Shadow-mode decisions that would have been "
      "denials.\n");
  out.append("# TYPE sluiced_shadow_over_limit_total counter\n");
  for (const auto& [labels, c] : rows) {
    AppendMetricLine(out, "sluiced_shadow_over_limit_total", labels, c->shadow_over_limit);
  }
  out.append(
      "# HELP sluiced_top_limited_key_denials Denials of each rule's most denied keys (top " +
      std::to_string(kTopKeysInMetrics) + " per rule, space-saving counts).\n");
  out.append("# TYPE sluiced_top_limited_key_denials gauge\n");
  for (const auto& [labels, c] : rows) {
    if (const TopKeys* t = c->top.load(std::memory_order_acquire)) {
      AppendTopKeySeries(out, labels, *t, kTopKeysInMetrics);
    }
  }
  RenderRlqs(out);
  out.append("# HELP sluiced_unknown_domain_total Requests for a domain with no configuration.\n");
  out.append("# TYPE sluiced_unknown_domain_total counter\n");
  AppendMetricLine(out, "sluiced_unknown_domain_total", "", unknown_domain_.load());
  out.append("# HELP sluiced_config_reloads_total Configuration reloads by result.\n");
  out.append("# TYPE sluiced_config_reloads_total counter\n");
  AppendMetricLine(out, "sluiced_config_reloads_total", "result=\"ok\"", reload_ok_.load());
  AppendMetricLine(out, "sluiced_config_reloads_total", "result=\"failed\"", reload_failed_.load());
  out.append("# HELP sluiced_store_latency_seconds Latency of store calls.\n");
  out.append("# TYPE sluiced_store_latency_seconds histogram\n");
  std::uint64_t cumulative = 0;
  char le[32];
  for (int b = 0; b <= kBuckets; ++b) {
    cumulative += latency_buckets_[b].load(std::memory_order_relaxed);
    if (b < kBuckets) {
      std::snprintf(le, sizeof le, "le=\"%g\"", static_cast<double>(kBucketBoundsUs[b]) / 1e6);
    } else {
      std::snprintf(le, sizeof le, "le=\"+Inf\"");
    }
    AppendMetricLine(out, "sluiced_store_latency_seconds_bucket", le, cumulative);
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "sluiced_store_latency_seconds_sum %.6f\n",
                static_cast<double>(latency_sum_us_.load()) / 1e6);
  out.append(sum);
  AppendMetricLine(out, "sluiced_store_latency_seconds_count", "", latency_count_.load());
}

void Metrics::Render(std::string& out, const EngineSeries& s) const {
  Render(out);
  auto line = [&out](std::string_view name, std::string_view labels, std::uint64_t v) {
    AppendMetricLine(out, name, labels, v);
  };
  out.append("# HELP sluiced_limiter_decisions_total Decisions made by the limiters.\n");
  out.append("# TYPE sluiced_limiter_decisions_total counter\n");
  line("sluiced_limiter_decisions_total", "", s.limiter.decisions);
  out.append(
      "# HELP sluiced_limiter_denied_total Denied limiter decisions (not in shadow mode).\n");
  out.append("# TYPE sluiced_limiter_denied_total counter\n");
  line("sluiced_limiter_denied_total", "", s.limiter.denied);
  out.append("# HELP sluiced_store_errors_total Store calls that failed or timed out.\n");
  out.append("# TYPE sluiced_store_errors_total counter\n");
  line("sluiced_store_errors_total", "", s.limiter.store_errors);
  out.append(
      "# HELP sluiced_failure_policy_total Decisions made without the store, by failure "
      "policy.\n");
  out.append("# TYPE sluiced_failure_policy_total counter\n");
  line("sluiced_failure_policy_total", "outcome=\"fail_open\"", s.limiter.fail_open);
  line("sluiced_failure_policy_total", "outcome=\"fail_closed\"", s.limiter.fail_closed);
  line("sluiced_failure_policy_total", "outcome=\"local_fallback\"", s.limiter.local_fallback);
  out.append("# HELP sluiced_deny_cache_hits_total Denials answered locally by the deny cache.\n");
  out.append("# TYPE sluiced_deny_cache_hits_total counter\n");
  line("sluiced_deny_cache_hits_total", "", s.limiter.deny_cache_hits);
  out.append(
      "# HELP sluiced_lease_total Hot-key leases (lease in a rule): decisions allowed from "
      "a lease without a store call (hit), leases taken from the store (grant) and "
      "leases given back (return).\n");
  out.append("# TYPE sluiced_lease_total counter\n");
  line("sluiced_lease_total", "event=\"hit\"", s.limiter.lease_hits);
  line("sluiced_lease_total", "event=\"grant\"", s.limiter.lease_grants);
  line("sluiced_lease_total", "event=\"return\"", s.limiter.lease_returns);
  out.append(
      "# HELP sluiced_deny_cache_bytes Bytes reserved by the deny cache (fixed at start).\n");
  out.append("# TYPE sluiced_deny_cache_bytes gauge\n");
  line("sluiced_deny_cache_bytes", "", s.deny_cache_bytes);
  out.append(
      "# HELP sluiced_store_keys Keys held by the in-process stores: the embedded store "
      "(memory://) and the local fallback's.\n");
  out.append("# TYPE sluiced_store_keys gauge\n");
  if (s.embedded) line("sluiced_store_keys", "store=\"embedded\"", s.embedded_keys);
  line("sluiced_store_keys", "store=\"local_fallback\"", s.fallback_keys);
  out.append("# HELP sluiced_store_max_keys Key cap of the in-process stores (max_keys).\n");
  out.append("# TYPE sluiced_store_max_keys gauge\n");
  if (s.embedded) line("sluiced_store_max_keys", "store=\"embedded\"", s.embedded_max_keys);
  line("sluiced_store_max_keys", "store=\"local_fallback\"", s.fallback_max_keys);
  out.append(
      "# HELP sluiced_key_cap_refusals_total Store calls refused because the embedded store "
      "was at its key cap (decided by failure mode).\n");
  out.append("# TYPE sluiced_key_cap_refusals_total counter\n");
  line("sluiced_key_cap_refusals_total", "", s.key_cap_refusals);
  out.append("# HELP sluiced_config_generation Generation of the configuration in use.\n");
  out.append("# TYPE sluiced_config_generation gauge\n");
  line("sluiced_config_generation", "", s.generation);
  out.append("# HELP sluiced_config_rules Limits in the configuration in use.\n");
  out.append("# TYPE sluiced_config_rules gauge\n");
  line("sluiced_config_rules", "", s.rules);
}

}  // namespace sluice::service
