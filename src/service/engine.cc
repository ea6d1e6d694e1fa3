// sluiced's orchestration: validate a request, match its descriptors (service/rules.h),
// decide them in one batch through the process's Decider, and turn the decisions into
// per-descriptor statuses, metrics and headers.
#include "service/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "limiter/limiter_internal.h"
#include "service/log.h"
#include "service/timed_store.h"
#include "sluice/key.h"
#include "sluice/permit.h"

namespace sluice::service {
namespace {

constexpr std::size_t kMaxChecks = kMaxBatchChecks;
// Entries per descriptor the matcher records a path for (settings.max_entries' bound).
constexpr std::size_t kMaxEntries = 64;

std::uint64_t Fnv(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string CeilSeconds(Micros us) {
  if (us <= 0) return "0";
  return std::to_string((us + 999'999) / 1'000'000);
}

// The policy name a header names a limit by: its rule's name, else "d<descriptor index>"
// (with several limits on the descriptor, "d<descriptor index>.<limit index>").
std::string HeaderPolicyName(const DescriptorStatus& st, std::size_t i, std::size_t j, bool multi) {
  std::string name = !st.name.empty() ? st.name
                     : multi          ? "d" + std::to_string(i) + "." + std::to_string(j)
                                      : "d" + std::to_string(i);
  // A structured-field string: escape '"' and '\\', drop what it cannot hold.
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) continue;
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// One limit reported in the headers: a descriptor's status (or one of its `limits`) and
// the name headers call it by.
struct HeaderItem {
  const DescriptorStatus* st;
  std::string name;  // the rule's name, else "d<descriptor>" or "d<descriptor>.<limit>"
};

// Headers for every limit of every limited descriptor; `binding` indexes the binding
// item. See the header table in docs/sluiced.md.
void AppendHeaders(Settings::Headers mode, const std::vector<HeaderItem>& items,
                   std::size_t binding, std::vector<std::pair<std::string, std::string>>& h) {
  const DescriptorStatus& b = *items[binding].st;
  const bool over = b.code == Code::kOverLimit;
  if (mode == Settings::Headers::kDraft10) {
    std::string policy, state;
    for (const HeaderItem& it : items) {
      const DescriptorStatus& st = *it.st;
      const std::string name = "\"" + it.name + "\"";
      if (!policy.empty()) policy += ", ";
      policy += name + ";q=" + std::to_string(st.capacity) + ";w=" + CeilSeconds(st.window);
      if (!state.empty()) state += ", ";
      state += name + ";r=" + std::to_string(st.limit_remaining) +
               ";t=" + CeilSeconds(st.duration_until_reset);
    }
    h.emplace_back("ratelimit-policy", policy);
    h.emplace_back("ratelimit", state);
  } else {
    const std::string prefix =
        mode == Settings::Headers::kRateLimit ? "ratelimit-" : "x-ratelimit-";
    // The binding limit; with several limits, then every limit's quota policy (Envoy's
    // draft-03 form). One limit: the plain number.
    std::string limit = std::to_string(b.capacity);
    for (std::size_t i = 0; items.size() > 1 && i < items.size(); ++i) {
      const DescriptorStatus& st = *items[i].st;
      limit += ", " + std::to_string(st.capacity) + ";w=" + CeilSeconds(st.window);
      if (!st.name.empty()) limit += ";name=\"" + items[i].name + "\"";
    }
    h.emplace_back(prefix + "limit", limit);
    h.emplace_back(prefix + "remaining", std::to_string(b.limit_remaining));
    h.emplace_back(prefix + "reset", CeilSeconds(b.duration_until_reset));
  }
  if (over) h.emplace_back("retry-after", CeilSeconds(b.retry_after));
}

}  // namespace

struct Engine::Snapshot {
  std::uint64_t generation = 0;
  std::unique_ptr<RuleSet> rules;
  const Settings& settings() const { return rules->config().settings; }
};

// A request between matching and deciding. It owns what the decision needs (the rules
// of caller overrides, the store keys, the metric series), so that an asynchronous
// decision outlives the caller's request.
//
// A descriptor matches one rule, or several (`rate_limits`): each matched rule is a
// "slot", in descriptor order then list order, at most kMaxChecks per request.
struct Engine::Prepared {
  std::shared_ptr<Snapshot> snap;
  std::size_t n = 0;  // descriptors
  // Per descriptor: its first slot and its number of slots (0: no limit applies).
  std::uint8_t first[kMaxChecks] = {};
  std::uint8_t count[kMaxChecks] = {};
  // The rules of caller overrides, per descriptor; allocated for the first request that
  // has one (a Rule is a few hundred bytes: most requests need none).
  std::unique_ptr<Rule[]> overrides;
  // Per slot: its descriptor, its rule (null: replaced by another matched limit), its
  // check, its counters.
  std::size_t nslots = 0;
  std::uint8_t desc[kMaxChecks] = {};
  const Rule* rule[kMaxChecks] = {};
  int check[kMaxChecks] = {};
  DescriptorCounters* counters[kMaxChecks] = {};
  // Per check (slots with the same rule and key share one, costs added).
  decide::Check checks[kMaxChecks];
  std::string keys[kMaxChecks];
  std::size_t nchecks = 0;
  // --- concurrency limits (issue #12) ---
  // A permit operation (acquire, release, extend), its permit id (the checks view it),
  // and how many checks are of concurrency limits, with their shortest lease.
  bool permit_mode = false;
  StoreOp op = StoreOp::kDecide;
  std::string permit_id;
  std::size_t nconcurrency = 0;
  Micros lease = 0;
};

Engine::~Engine() = default;

Result<std::shared_ptr<Engine::Snapshot>> Engine::Compile(const Config& config) {
  auto rules = RuleSet::Compile(config, *metrics_);
  if (!rules.ok()) return rules.status();
  auto s = std::make_shared<Snapshot>();
  s->rules = std::move(*rules);
  return s;
}

Result<std::unique_ptr<Engine>> Engine::Create(const Config& config, Options options) {
  if (!options.store) return Status::InvalidArgument("engine needs a store");
  std::unique_ptr<Engine> e(new Engine());
  e->metrics_ = std::make_shared<Metrics>();
  e->embedded_ = std::dynamic_pointer_cast<MemoryStore>(options.store);
  Engine* self = e.get();
  e->store_ = std::make_shared<TimedStore>(std::move(options.store), e->metrics_,
                                           [self] { self->OnKeyCap(); });
  e->store_remote_ = e->store_->IsRemote();
  e->clock_ = options.clock ? std::move(options.clock) : std::make_shared<SteadyEpochClock>();
  decide::Options d;
  d.store = e->store_;
  d.clock = e->clock_;
  d.deny_cache = true;
  d.deny_cache_bytes = options.deny_cache_bytes;
  d.fallback_max_keys = options.fallback_max_keys;
  e->decider_ = std::make_unique<decide::Decider>(std::move(d));
  e->max_keys_ = config.settings.max_keys;
  auto snap = e->Compile(config);
  if (!snap.ok()) return snap.status();
  (*snap)->generation = e->generation_.fetch_add(1) + 1;
  std::atomic_store(&e->snapshot_, std::move(*snap));
  return e;
}

void Engine::OnKeyCap() {
  if (embedded_ == nullptr) return;
  const std::uint64_t n = key_cap_refusals_.fetch_add(1, std::memory_order_relaxed) + 1;
  // One line when the cap is first hit, then at most one per 10 s while it lasts, with
  // the refusals since the last line.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = key_cap_logged_at_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 10'000'000) return;
  if (!key_cap_logged_at_.compare_exchange_strong(last, now)) return;
  const std::uint64_t before = key_cap_logged_refusals_.exchange(n);
  const MemoryStoreStats st = embedded_->Stats();
  Log(LogLevel::kWarn, "key_cap_reached",
      {{"store", "embedded"},
       {"keys", std::to_string(st.keys)},
       {"max_keys", std::to_string(max_keys_)},
       {"refused", std::to_string(n - before)},
       {"decisions", "new keys by each rule's failure_mode, not over_limit"}});
}

Status Engine::Reload(const Config& config) {
  auto snap = Compile(config);
  if (!snap.ok()) {
    metrics_->CountReload(false);
    return snap.status();
  }
  (*snap)->generation = generation_.fetch_add(1) + 1;
  std::atomic_store(&snapshot_, std::move(*snap));
  metrics_->CountReload(true);
  return Status::Ok();
}

Settings Engine::settings() const {
  return std::atomic_load(&snapshot_)->settings();
}

std::shared_ptr<const Settings> Engine::settings_ptr() const {
  std::shared_ptr<Snapshot> snap = std::atomic_load(&snapshot_);
  return std::shared_ptr<const Settings>(snap, &snap->settings());
}

EngineStats Engine::Stats() const {
  auto snap = std::atomic_load(&snapshot_);
  EngineStats st;
  st.limiter = decider_->Stats();
  st.deny_cache_bytes = decider_->DenyCacheBytes();
  st.generation = snap->generation;
  st.domains = snap->rules->domain_count();
  st.rules = snap->rules->rule_count();
  return st;
}

std::string Engine::RenderMetrics() const {
  std::string out;
  out.reserve(8192);
  metrics_->Render(out);
  const EngineStats st = Stats();
  auto line = [&out](std::string_view name, std::string_view labels, std::uint64_t v) {
    AppendMetricLine(out, name, labels, v);
  };
  out.append("# HELP sluiced_limiter_decisions_total Decisions made by the limiters.\n");
  out.append("# TYPE sluiced_limiter_decisions_total counter\n");
  line("sluiced_limiter_decisions_total", "", st.limiter.decisions);
  out.append(
      "# HELP sluiced_limiter_denied_total Denied limiter decisions (not in shadow mode).\n");
  out.append("# TYPE sluiced_limiter_denied_total counter\n");
  line("sluiced_limiter_denied_total", "", st.limiter.denied);
  out.append("# HELP sluiced_store_errors_total Store calls that failed or timed out.\n");
  out.append("# TYPE sluiced_store_errors_total counter\n");
  line("sluiced_store_errors_total", "", st.limiter.store_errors);
  out.append(
      "# HELP sluiced_failure_policy_total Decisions made without the store, by failure "
      "policy.\n");
  out.append("# TYPE sluiced_failure_policy_total counter\n");
  line("sluiced_failure_policy_total", "outcome=\"fail_open\"", st.limiter.fail_open);
  line("sluiced_failure_policy_total", "outcome=\"fail_closed\"", st.limiter.fail_closed);
  line("sluiced_failure_policy_total", "outcome=\"local_fallback\"", st.limiter.local_fallback);
  out.append("# HELP sluiced_deny_cache_hits_total Denials answered locally by the deny cache.\n");
  out.append("# TYPE sluiced_deny_cache_hits_total counter\n");
  line("sluiced_deny_cache_hits_total", "", st.limiter.deny_cache_hits);
  out.append(
      "# HELP sluiced_lease_total Hot-key leases (lease in a rule): decisions allowed from "
      "a lease without a store call (hit), leases taken from the store (grant) and "
      "leases given back (return).\n");
  out.append("# TYPE sluiced_lease_total counter\n");
  line("sluiced_lease_total", "event=\"hit\"", st.limiter.lease_hits);
  line("sluiced_lease_total", "event=\"grant\"", st.limiter.lease_grants);
  line("sluiced_lease_total", "event=\"return\"", st.limiter.lease_returns);
  out.append(
      "# HELP sluiced_deny_cache_bytes Bytes reserved by the deny cache (fixed at start).\n");
  out.append("# TYPE sluiced_deny_cache_bytes gauge\n");
  line("sluiced_deny_cache_bytes", "", st.deny_cache_bytes);
  out.append(
      "# HELP sluiced_store_keys Keys held by the in-process stores: the embedded store "
      "(memory://) and the local fallback's.\n");
  out.append("# TYPE sluiced_store_keys gauge\n");
  if (embedded_ != nullptr)
    line("sluiced_store_keys", "store=\"embedded\"", embedded_->Stats().keys);
  line("sluiced_store_keys", "store=\"local_fallback\"", decider_->FallbackKeys());
  out.append("# HELP sluiced_store_max_keys Key cap of the in-process stores (max_keys).\n");
  out.append("# TYPE sluiced_store_max_keys gauge\n");
  if (embedded_ != nullptr) line("sluiced_store_max_keys", "store=\"embedded\"", max_keys_);
  line("sluiced_store_max_keys", "store=\"local_fallback\"", decider_->FallbackMaxKeys());
  out.append(
      "# HELP sluiced_key_cap_refusals_total Store calls refused because the embedded store "
      "was at its key cap (decided by failure mode).\n");
  out.append("# TYPE sluiced_key_cap_refusals_total counter\n");
  line("sluiced_key_cap_refusals_total", "", key_cap_refusals_.load(std::memory_order_relaxed));
  out.append("# HELP sluiced_config_generation Generation of the configuration in use.\n");
  out.append("# TYPE sluiced_config_generation gauge\n");
  line("sluiced_config_generation", "", st.generation);
  out.append("# HELP sluiced_config_rules Limits in the configuration in use.\n");
  out.append("# TYPE sluiced_config_rules gauge\n");
  line("sluiced_config_rules", "", st.rules);
  return out;
}

std::string Engine::DumpConfig() const {
  return std::atomic_load(&snapshot_)->rules->Dump();
}

Status Engine::Prepare(const RateLimitRequest& req, Prepared& p, RateLimitResponse* resp,
                       bool* decide, const StoreOp* permit_op, std::string_view permit_id) {
  *decide = false;
  p.permit_mode = permit_op != nullptr;
  p.op = permit_op ? *permit_op : StoreOp::kDecide;
  p.permit_id.assign(permit_id);
  p.nconcurrency = 0;
  p.lease = 0;
  p.snap = std::atomic_load(&snapshot_);
  const Settings& settings = p.snap->settings();
  const RuleSet& rules = *p.snap->rules;
  resp->overall_code = Code::kOk;
  resp->statuses.clear();
  resp->response_headers.clear();
  if (req.domain.empty()) return Status::InvalidArgument("domain must not be empty");
  const std::size_t n = req.descriptors.size();
  if (n == 0) return Status::InvalidArgument("descriptors must not be empty");
  if (n > settings.max_descriptors || n > kMaxChecks) {
    return Status::InvalidArgument("too many descriptors: " + std::to_string(n) + " (at most " +
                                   std::to_string(std::min(settings.max_descriptors, kMaxChecks)) +
                                   ")");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const DescriptorRequest& d = req.descriptors[i];
    if (d.entries.size() > settings.max_entries) {
      return Status::InvalidArgument("descriptor " + std::to_string(i) + " has " +
                                     std::to_string(d.entries.size()) + " entries (at most " +
                                     std::to_string(settings.max_entries) + ")");
    }
    for (const Entry& e : d.entries) {
      if (e.key.empty()) {
        return Status::InvalidArgument("descriptor " + std::to_string(i) +
                                       " has an entry with an empty key");
      }
    }
    if (d.has_override) {
      if (d.override_requests_per_unit == 0) {
        return Status::InvalidArgument("descriptor " + std::to_string(i) +
                                       ": limit override needs requests_per_unit > 0");
      }
      if (!ValidUnit(d.override_unit)) {
        return Status::InvalidArgument(
            "descriptor " + std::to_string(i) +
            ": limit override unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR");
      }
    }
  }
  resp->statuses.resize(n);
  p.n = n;
  p.nchecks = 0;

  const Node* root = rules.Domain(req.domain);
  if (root == nullptr) {
    // Like envoyproxy/ratelimit: a domain without configuration limits nothing.
    metrics_->CountUnknownDomain();
    return Status::Ok();
  }

  // 1. Match every descriptor to its rules; a caller's override makes a rule of its own
  // (no state is kept per override).
  p.nslots = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const DescriptorRequest& d = req.descriptors[i];
    p.first[i] = static_cast<std::uint8_t>(p.nslots);
    p.count[i] = 0;
    if (d.entries.empty()) continue;  // envoyproxy/ratelimit: no entries, no limit (OK)
    const Rule* r = nullptr;
    if (d.has_override) {
      if (!p.overrides) p.overrides = std::make_unique<Rule[]>(kMaxChecks);
      Status s = rules.OverrideRule(req.domain, d.override_requests_per_unit, d.override_unit,
                                    p.overrides[i]);
      if (!s.ok())
        return Status::InvalidArgument("descriptor " + std::to_string(i) + ": " + s.message());
      r = &p.overrides[i];
    } else {
      r = RuleSet::Match(*root, d.entries);
    }
    for (; r != nullptr; r = r->next) {
      if (p.nslots == kMaxChecks) {
        std::size_t total = p.nslots;
        for (const Rule* x = r; x != nullptr; x = x->next) ++total;
        for (std::size_t k = i + 1; k < n; ++k) {
          const DescriptorRequest& o = req.descriptors[k];
          if (o.entries.empty()) continue;
          if (o.has_override) {
            ++total;
            continue;
          }
          for (const Rule* x = RuleSet::Match(*root, o.entries); x != nullptr; x = x->next) {
            ++total;
          }
        }
        return Status::InvalidArgument("the request's descriptors match " + std::to_string(total) +
                                       " limits (at most " + std::to_string(kMaxChecks) +
                                       " in one request)");
      }
      p.desc[p.nslots] = static_cast<std::uint8_t>(i);
      p.rule[p.nslots] = r;
      p.check[p.nslots] = -1;
      ++p.nslots;
      ++p.count[i];
    }
  }
  // 2. Limits replaced by another matched limit do not apply.
  for (std::size_t a = 0; a < p.nslots; ++a) {
    if (p.rule[a] == nullptr || p.rule[a]->replaces.empty()) continue;
    for (const std::string& name : p.rule[a]->replaces) {
      for (std::size_t b = 0; b < p.nslots; ++b) {
        if (b != a && p.rule[b] != nullptr && p.rule[b]->name == name) p.rule[b] = nullptr;
      }
    }
  }
  // 3. One check per distinct (rule, key); the same limit on the same key twice in one
  // request is one check with the costs added. The limits of one descriptor share its
  // key (and so its cluster slot: one store call) and differ by policy name.
  thread_local std::string key;
  const Node* path[kMaxEntries];
  for (std::size_t i = 0; i < n; ++i) {
    bool any = false;
    for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) any = any || p.rule[a];
    if (!any) continue;
    const DescriptorRequest& d = req.descriptors[i];
    // The nodes each entry landed on: share_threshold and value_to_metric are per level.
    const bool matched_tree = !d.has_override && d.entries.size() <= kMaxEntries;
    if (matched_tree) RuleSet::Match(*root, d.entries, path);
    bool value_to_metric = false;
    for (std::size_t k = 0; matched_tree && k < d.entries.size(); ++k) {
      value_to_metric = value_to_metric || path[k]->value_to_metric;
    }
    bool key_built = false;
    const std::uint64_t cost =
        d.has_hits_addend ? d.hits_addend : (req.hits_addend ? req.hits_addend : 1);
    for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) {
      const Rule* r = p.rule[a];
      if (r == nullptr) continue;
      // --- concurrency limits (issue #12) ---
      const bool concurrency = !r->unlimited && r->policy.algorithm == Algorithm::kConcurrency;
      if (concurrency && !p.permit_mode) {
        // A permit taken here could never be given back (Envoy's rate limit API, /json,
        // /v1/check and nginx have no release): refuse, naming the way that works.
        return Status::InvalidArgument(
            "descriptor " + std::to_string(i) + " matches the concurrency limit " + r->path +
            (r->name.empty() ? "" : " ('" + r->name + "')") +
            ", which this API cannot release: take permits with POST /v1/acquire and give "
            "them back with POST /v1/release");
      }
      if (!concurrency && p.permit_mode && p.op != StoreOp::kDecide) {
        p.rule[a] = nullptr;  // a release or an extend leaves rate limits alone
        continue;
      }
      p.counters[a] = r->counters;
      if (r->detailed_metric || value_to_metric) {
        std::string label = r->path;
        for (std::size_t k = 0; k < d.entries.size(); ++k) {
          if (!r->detailed_metric && !(matched_tree && path[k]->value_to_metric)) continue;
          const Entry& e = d.entries[k];
          label += "|";
          label.append(e.key);
          label += "=";
          label.append(e.value);
        }
        p.counters[a] = metrics_->Descriptor(req.domain, label);
      }
      if (r->unlimited) continue;
      if (!key_built) {
        key_built = true;
        key.clear();
        AppendEscaped(key, req.domain);
        for (std::size_t k = 0; k < d.entries.size(); ++k) {
          const Entry& e = d.entries[k];
          key.push_back(':');
          AppendEscaped(key, e.key);
          key.push_back(':');
          // share_threshold: the pattern, not the value, so matching values share a
          // counter.
          if (matched_tree && !path[k]->shared_pattern.empty()) {
            AppendEscaped(key, path[k]->shared_pattern);
          } else {
            AppendEscaped(key, e.value);
          }
        }
        if (key.size() > kMaxKeyBytes) {
          char buf[48];
          std::snprintf(buf, sizeof buf, "h.%016llx%016llx",
                        static_cast<unsigned long long>(Fnv(key, 0xcbf29ce484222325ULL)),
                        static_cast<unsigned long long>(Fnv(key, 0x84222325cbf29ce4ULL)));
          key = buf;
        }
      }
      std::string& store_key = p.keys[p.nchecks];
      limiter_internal::BuildStoreKey(store_key, "sluiced", key, r->policy.name);
      for (std::size_t c = 0; c < p.nchecks; ++c) {
        if (p.checks[c].key == store_key) p.check[a] = static_cast<int>(c);
      }
      if (p.check[a] >= 0) {
        if (!concurrency) p.checks[p.check[a]].cost += cost;  // one permit per key
        continue;
      }
      p.check[a] = static_cast<int>(p.nchecks);
      p.checks[p.nchecks] = decide::Check{&r->policy, &r->fallback, store_key, cost};
      if (concurrency) {
        // One permit (a slot) per acquisition, whatever the request's hits.
        decide::Check& c = p.checks[p.nchecks];
        c.cost = 1;
        c.permit = p.permit_id;
        p.lease = p.nconcurrency == 0 ? r->policy.window : std::min(p.lease, r->policy.window);
        ++p.nconcurrency;
      }
      ++p.nchecks;
    }
  }
  // Keys are views into p.keys, which the loop above may still have grown: set them
  // once every key is final.
  for (std::size_t c = 0; c < p.nchecks; ++c) p.checks[c].key = p.keys[c];
  if (p.nchecks == 0) {
    Finish(p, {}, resp);
    return Status::Ok();
  }
  *decide = true;
  return Status::Ok();
}

void Engine::Finish(const Prepared& p, std::span<const Decision> decisions,
                    RateLimitResponse* resp) const {
  const Settings& settings = p.snap->settings();
  // Per limited slot, its decision and status; the binding one (of a descriptor, of the
  // request) is chosen among them by the decision layer's rule.
  Decision per[kMaxChecks];
  DescriptorStatus slot_status[kMaxChecks];
  std::size_t slot_of[kMaxChecks];
  std::size_t m = 0;
  for (std::size_t i = 0; i < p.n; ++i) {
    const std::size_t m0 = m;
    for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) {
      const Rule* r = p.rule[a];
      if (r == nullptr) continue;
      DescriptorCounters* c = p.counters[a];
      if (r->unlimited) {
        resp->statuses[i].limit_remaining = std::numeric_limits<std::uint32_t>::max();
        if (c != nullptr) c->unlimited.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const Decision& d = decisions[p.check[a]];
      DescriptorStatus& st = slot_status[m];
      st = DescriptorStatus{};
      st.has_limit = true;
      st.requests_per_unit = r->requests_per_unit;
      st.unit = r->unit;
      st.name = r->name;
      // OVER_LIMIT reports 0 remaining, as envoyproxy/ratelimit does (a denial for a
      // cost above what remains leaves some units, but none for this request).
      st.limit_remaining = d.allowed ? static_cast<std::uint32_t>(std::min<std::uint64_t>(
                                           d.remaining, std::numeric_limits<std::uint32_t>::max()))
                                     : 0;
      st.capacity = r->policy.Capacity();
      st.window = r->policy.window;
      st.concurrency = r->policy.algorithm == Algorithm::kConcurrency;
      st.duration_until_reset = d.reset_after;
      st.retry_after = d.retry_after;
      st.code = d.allowed ? Code::kOk : Code::kOverLimit;
      // The embedded store fails only at its key cap: the failure mode decided, and that
      // is neither the limit's "ok" nor its "over_limit".
      const bool key_cap = embedded_ != nullptr && (d.source == DecisionSource::kFailOpen ||
                                                    d.source == DecisionSource::kFailClosed ||
                                                    d.source == DecisionSource::kLocalFallback);
      if (!d.allowed) resp->overall_code = Code::kOverLimit;
      if (key_cap) {
        if (c != nullptr) c->key_cap.fetch_add(1, std::memory_order_relaxed);
      } else if (!d.allowed) {
        if (c != nullptr) c->over_limit.fetch_add(1, std::memory_order_relaxed);
      } else if (d.shadow_denied && r->quota_mode) {
        if (c != nullptr) c->quota_over_limit.fetch_add(1, std::memory_order_relaxed);
      } else if (d.shadow_denied) {
        if (c != nullptr) c->shadow_over_limit.fetch_add(1, std::memory_order_relaxed);
      } else if (c != nullptr) {
        c->ok.fetch_add(1, std::memory_order_relaxed);
        const double used = static_cast<double>(d.limit - std::min(d.limit, d.remaining));
        if (d.limit > 0 &&
            used > std::floor(settings.near_limit_ratio * static_cast<double>(d.limit))) {
          c->near_limit.fetch_add(1, std::memory_order_relaxed);
        }
      }
      per[m] = d;
      per[m].remaining = st.limit_remaining;
      slot_of[m++] = a;
    }
    if (m == m0) continue;
    // The descriptor's status is its binding limit's; with several limits
    // (`rate_limits`), each one is listed too.
    const std::size_t bind = m0 + decide::BindingIndex(std::span<const Decision>(per + m0, m - m0));
    DescriptorStatus& out = resp->statuses[i];
    out = slot_status[bind];
    if (p.rule[slot_of[bind]]->multi) {
      out.limits.assign(slot_status + m0, slot_status + m);
    }
  }
  if (settings.response_headers != Settings::Headers::kNone && m > 0) {
    std::vector<HeaderItem> items;
    items.reserve(m);
    for (std::size_t k = 0; k < m; ++k) {
      const std::size_t a = slot_of[k];
      const std::size_t i = p.desc[a];
      const Rule* r = p.rule[a];
      const DescriptorStatus& ds = resp->statuses[i];
      // Point into the response: the descriptor's own status, or its entry in limits.
      const DescriptorStatus* st = &ds;
      if (!ds.limits.empty()) {
        std::size_t j = 0;
        for (std::size_t q = 0; q < k; ++q) j += p.desc[slot_of[q]] == i ? 1 : 0;
        st = &ds.limits[j];
      }
      items.push_back(HeaderItem{st, HeaderPolicyName(*st, i, r->index, r->multi)});
    }
    AppendHeaders(settings.response_headers, items,
                  decide::BindingIndex(std::span<const Decision>(per, m)), resp->response_headers);
  }
}

Status Engine::ShouldRateLimit(const RateLimitRequest& req, RateLimitResponse* resp) {
  thread_local Prepared p;
  struct Release {
    Prepared& p;
    ~Release() { p.snap.reset(); }  // a thread must not keep an old config alive
  } release{p};
  bool decide = false;
  if (Status s = Prepare(req, p, resp, &decide); !s.ok() || !decide) return s;
  Decision out[kMaxChecks];
  auto bind = decider_->Decide(std::span<const decide::Check>(p.checks, p.nchecks),
                               std::span<Decision>(out, p.nchecks));
  if (!bind.ok()) return bind.status();
  Finish(p, std::span<const Decision>(out, p.nchecks), resp);
  return Status::Ok();
}

void Engine::ShouldRateLimitAsync(const RateLimitRequest& req, AsyncDone done) {
  if (!store_remote_) {
    // An in-process store answers inline anyway: decide on this thread's scratch
    // (Prepared, response), without the heap objects an asynchronous answer needs. A
    // `done` that decides again on this thread gets a response of its own.
    thread_local RateLimitResponse scratch;
    thread_local bool busy = false;
    if (!busy) {
      busy = true;
      struct Free {
        ~Free() { busy = false; }
      } free_scratch;
      Status s = ShouldRateLimit(req, &scratch);
      done(s, scratch);
      return;
    }
    RateLimitResponse resp;
    Status s = ShouldRateLimit(req, &resp);
    done(s, resp);
    return;
  }
  auto p = std::make_shared<Prepared>();
  auto resp = std::make_shared<RateLimitResponse>();
  bool decide = false;
  Status s = Prepare(req, *p, resp.get(), &decide);
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  decider_->DecideAsync(std::span<const decide::Check>(p->checks, p->nchecks),
                        [this, p, resp, done = std::move(done)](
                            const Status& st, std::span<const Decision> d, std::size_t) {
                          if (st.ok()) Finish(*p, d, resp.get());
                          done(st, *resp);
                        });
}

// --- concurrency limits (issue #12): /v1/acquire, /v1/release, /v1/extend ---------

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void AppendVarint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

bool ReadVarint(std::string_view& in, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

void AppendBytes(std::string& out, std::string_view s) {
  AppendVarint(out, s.size());
  out.append(s);
}

bool ReadBytes(std::string_view& in, std::string_view* s) {
  std::uint64_t n = 0;
  if (!ReadVarint(in, &n) || n > in.size()) return false;
  *s = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

std::string Base64Url(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const std::uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                            (static_cast<unsigned char>(in[i + 1]) << 8) |
                            static_cast<unsigned char>(in[i + 2]);
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  if (i < in.size()) {
    std::uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    if (i + 1 < in.size()) out.push_back(kB64[(v >> 6) & 63]);
  }
  return out;
}

bool FromBase64Url(std::string_view in, std::string* out) {
  out->clear();
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const char* pos = std::strchr(kB64, c);
    if (c == '\0' || pos == nullptr) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(pos - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return bits < 6;
}

// 128 random bits as 32 lower-case hex characters (sluice/permit.h's id form).
std::string NewPermitId() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  char buf[kPermitIdLength + 1];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return std::string(buf, kPermitIdLength);
}

}  // namespace

std::string EncodePermitToken(std::string_view id, const RateLimitRequest& req) {
  std::string payload;
  AppendBytes(payload, req.domain);
  AppendVarint(payload, req.descriptors.size());
  for (const DescriptorRequest& d : req.descriptors) {
    AppendVarint(payload, d.entries.size());
    for (const Entry& e : d.entries) {
      AppendBytes(payload, e.key);
      AppendBytes(payload, e.value);
    }
  }
  std::string token(id);
  token.push_back('.');
  token.append(Base64Url(payload));
  return token;
}

Status DecodePermitToken(std::string_view token, std::string* id, std::string* storage,
                         RateLimitRequest* req) {
  const auto bad = [&](const char* why) {
    std::string shown(token.substr(0, 80));
    return Status::InvalidArgument("permit '" + shown + (token.size() > 80 ? "...'" : "'") +
                                   " is not a permit token from /v1/acquire (" + why + ")");
  };
  const std::size_t dot = token.find('.');
  if (dot == std::string_view::npos) return bad("no '.'");
  if (!IsPermitId(token.substr(0, dot))) return bad("bad permit id");
  if (!FromBase64Url(token.substr(dot + 1), storage)) return bad("bad encoding");
  std::string_view in(*storage);
  req->descriptors.clear();
  std::uint64_t n = 0;
  if (!ReadBytes(in, &req->domain) || !ReadVarint(in, &n) || n == 0 || n > kMaxChecks) {
    return bad("bad descriptors");
  }
  req->descriptors.resize(n);
  for (DescriptorRequest& d : req->descriptors) {
    std::uint64_t m = 0;
    if (!ReadVarint(in, &m) || m > kMaxEntries) return bad("bad entries");
    d.entries.resize(m);
    for (Entry& e : d.entries) {
      if (!ReadBytes(in, &e.key) || !ReadBytes(in, &e.value)) return bad("bad entry");
    }
  }
  if (!in.empty()) return bad("trailing bytes");
  id->assign(token.substr(0, dot));
  return Status::Ok();
}

void Engine::AcquireAsync(const RateLimitRequest& req, PermitDone done) {
  auto p = std::make_shared<Prepared>();
  auto resp = std::make_shared<PermitResponse>();
  bool decide = false;
  const StoreOp op = StoreOp::kDecide;
  const std::string id = NewPermitId();
  Status s = Prepare(req, *p, &resp->rate, &decide, &op, id);
  if (s.ok() && p->nconcurrency == 0) {
    s = Status::InvalidArgument(
        "no concurrency limit matches the request's descriptors (/v1/acquire takes permits "
        "of limits with `concurrency:`; use /v1/check for rate limits)");
  }
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  // The token names the descriptors, so that a release matches the same limits.
  std::string token = EncodePermitToken(id, req);
  decider_->DecideAsync(std::span<const decide::Check>(p->checks, p->nchecks),
                        [this, p, resp, token = std::move(token), done = std::move(done)](
                            const Status& st, std::span<const Decision> d, std::size_t) {
                          if (st.ok()) {
                            Finish(*p, d, &resp->rate);
                            if (resp->rate.overall_code != Code::kOverLimit) {
                              resp->permit = token;
                              resp->lease = p->lease;
                            }
                          }
                          done(st, *resp);
                        });
}

void Engine::PermitAsync(StoreOp op, std::string_view token, PermitDone done) {
  auto resp = std::make_shared<PermitResponse>();
  std::string id, storage;
  RateLimitRequest req;
  if (Status s = DecodePermitToken(token, &id, &storage, &req); !s.ok()) {
    done(s, *resp);
    return;
  }
  auto p = std::make_shared<Prepared>();
  bool decide = false;
  Status s = Prepare(req, *p, &resp->rate, &decide, &op, id);
  if (s.ok() && p->nconcurrency == 0) {
    s = Status::NotFound("permit " + id +
                         ": no concurrency limit matches its descriptors any more (the "
                         "configuration changed since it was acquired?)");
  }
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  decider_->DecideAsync(
      std::span<const decide::Check>(p->checks, p->nchecks),
      [p, resp, op, id = std::move(id), done = std::move(done)](
          const Status& st, std::span<const Decision> d, std::size_t) {
        if (!st.ok()) return done(st, *resp);
        // Decision::allowed of a release or an extend: the permit was held.
        bool held = false;
        for (const Decision& x : d) held = held || x.allowed;
        if (!held) {
          Status nf = Status::NotFound("permit " + id +
                                       " is not held: unknown, released already, or expired after "
                                       "its lease");
          return done(nf, *resp);
        }
        if (op == StoreOp::kExtend) resp->lease = p->lease;
        done(Status::Ok(), *resp);
      },
      op);
}

}  // namespace sluice::service
