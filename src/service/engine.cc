// Descriptor matching, policy mapping and atomic decisions for sluiced.
#include "service/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "sluice/key.h"

namespace sluice::service {
namespace {

constexpr std::size_t kMaxChecks = 16;
// Distinct multi-policy limiters kept per snapshot; beyond it a request builds a
// temporary limiter (correct, slower).
constexpr std::size_t kMaxCachedLimiters = 4096;
// Distinct caller overrides (requests_per_unit, unit) per snapshot.
constexpr std::size_t kMaxOverrides = 1024;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

std::uint64_t Fnv(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

const char* AlgorithmCode(Algorithm a) {
  switch (a) {
    case Algorithm::kFixedWindow:
      return "fw";
    case Algorithm::kSlidingWindowLog:
      return "swl";
    case Algorithm::kSlidingWindowCounter:
      return "swc";
    case Algorithm::kTokenBucket:
      return "tb";
    default:
      return "gcra";
  }
}

// Times a store's calls into the latency histogram.
class TimedStore final : public Store {
 public:
  TimedStore(std::shared_ptr<Store> inner, std::shared_ptr<Metrics> metrics)
      : inner_(std::move(inner)), metrics_(std::move(metrics)) {}
  Status Evaluate(std::span<const StoreCheck> checks, Micros now,
                  std::span<Decision> out) override {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = inner_->Evaluate(checks, now, out);
    metrics_->ObserveStoreLatency(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    return s;
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    return inner_->Reset(policy, key);
  }
  bool IsRemote() const override { return inner_->IsRemote(); }

 private:
  std::shared_ptr<Store> inner_;
  std::shared_ptr<Metrics> metrics_;
};

void AddStats(LimiterStats& a, const LimiterStats& b) {
  a.decisions += b.decisions;
  a.denied += b.denied;
  a.shadow_denied += b.shadow_denied;
  a.deny_cache_hits += b.deny_cache_hits;
  a.store_errors += b.store_errors;
  a.fail_open += b.fail_open;
  a.fail_closed += b.fail_closed;
  a.local_fallback += b.local_fallback;
}

std::string CeilSeconds(Micros us) {
  if (us <= 0) return "0";
  return std::to_string((us + 999'999) / 1'000'000);
}

}  // namespace

// A configured limit (a descriptor with a rate_limit block), or a caller override.
struct Rule {
  std::string path;  // metric label, e.g. "remote_address" or "path_/login.remote_address"
  bool unlimited = false;
  bool detailed_metric = false;
  std::string name;  // rate_limit.name
  std::vector<std::string> replaces;
  Unit unit = Unit::kUnknown;
  std::uint32_t requests_per_unit = 0;
  Policy policy;
  // Identifies the policy for limiter sharing: its name plus what the name leaves out.
  std::string id;
  std::unique_ptr<Limiter> limiter;  // this policy alone
  DescriptorCounters* counters = nullptr;
};

struct Node {
  StringMap<std::unique_ptr<Node>> exact;  // key + '\0' + value
  StringMap<std::unique_ptr<Node>> any;    // key
  struct Wildcard {
    std::string key;
    std::string prefix;
    std::unique_ptr<Node> node;
  };
  std::vector<Wildcard> wildcard;
  Rule* rule = nullptr;
  bool HasChildren() const { return !exact.empty() || !any.empty() || !wildcard.empty(); }
};

struct Engine::Retired {
  std::mutex mu;
  LimiterStats stats;
};

struct Engine::Snapshot {
  Config config;
  std::uint64_t generation = 0;
  StringMap<Node> domains;
  std::vector<std::unique_ptr<Rule>> rules;
  std::shared_ptr<Store> store;
  std::shared_ptr<const Clock> clock;
  std::shared_ptr<Metrics> metrics;
  std::shared_ptr<Retired> retired;

  mutable std::shared_mutex limiters_mu;
  StringMap<std::unique_ptr<Limiter>> limiters;
  mutable std::mutex overrides_mu;
  std::map<std::pair<std::uint32_t, int>, std::unique_ptr<Rule>> overrides;

  ~Snapshot() {
    LimiterStats sum;
    for (const auto& r : rules) {
      if (r->limiter) AddStats(sum, r->limiter->Stats());
    }
    for (const auto& [_, l] : limiters) AddStats(sum, l->Stats());
    for (const auto& [_, r] : overrides) AddStats(sum, r->limiter->Stats());
    std::lock_guard<std::mutex> lock(retired->mu);
    AddStats(retired->stats, sum);
  }

  LimiterStats LiveStats() const {
    LimiterStats sum;
    for (const auto& r : rules) {
      if (r->limiter) AddStats(sum, r->limiter->Stats());
    }
    {
      std::shared_lock<std::shared_mutex> lock(limiters_mu);
      for (const auto& [_, l] : limiters) AddStats(sum, l->Stats());
    }
    std::lock_guard<std::mutex> lock(overrides_mu);
    for (const auto& [_, r] : overrides) AddStats(sum, r->limiter->Stats());
    return sum;
  }

  Result<std::unique_ptr<Limiter>> MakeLimiter(std::vector<Policy> policies) const {
    LimiterOptions o;
    o.policies = std::move(policies);
    o.store = store;
    o.clock = clock;
    o.key_prefix = "sluiced";
    o.deny_cache = store->IsRemote();
    o.deny_cache_max_keys = store->IsRemote() ? 4096 : 16;
    return Limiter::Create(std::move(o));
  }

  // Fills in a rule's policy name, id, limiter and counters.
  Status FinishRule(Rule& r, const std::string& domain, const std::string& policy_name,
                    Algorithm algorithm, std::uint64_t burst, FailureMode failure,
                    std::uint32_t divisor, bool shadow) {
    r.counters = metrics->Descriptor(domain, r.path);
    if (r.unlimited) return Status::Ok();
    Policy& p = r.policy;
    p.algorithm = algorithm;
    p.limit = r.requests_per_unit;
    p.window = UnitMicros(r.unit);
    p.burst = burst;
    p.failure_mode = failure;
    p.fallback_divisor = divisor;
    p.shadow = shadow || config.settings.shadow_mode;
    // The name carries every parameter that shapes the stored state, so a changed limit
    // starts afresh while an unchanged one keeps its counters across reloads.
    const std::string params = std::string(AlgorithmCode(algorithm)) + "." +
                               std::to_string(p.limit) + "." + std::to_string(p.window / 1000) +
                               "." + std::to_string(burst);
    // Two limits with equal parameters but different failure modes can meet in one
    // request, and a limiter needs distinct names: the mode joins the name unless it is
    // the default.
    std::string mode;
    if (failure == FailureMode::kFailClosed) mode = ".fc";
    if (failure == FailureMode::kLocalFallback) mode = ".lf" + std::to_string(divisor);
    p.name = (policy_name.empty() ? params : policy_name + "." + AlgorithmCode(algorithm)) + mode;
    r.id = p.name + "|" + (p.shadow ? "s" : "-") + FailureModeName(failure) + "|" +
           std::to_string(divisor) + "|" + params;
    auto l = MakeLimiter({p});
    if (!l.ok()) return l.status();
    r.limiter = std::move(*l);
    return Status::Ok();
  }

  Status AddDescriptors(const std::string& domain, Node& node,
                        const std::vector<DescriptorSpec>& specs, const std::string& parent) {
    for (const DescriptorSpec& d : specs) {
      auto child = std::make_unique<Node>();
      Node* c = child.get();
      const std::string part = d.has_value ? d.key + "_" + d.value : d.key;
      const std::string path = parent.empty() ? part : parent + "." + part;
      if (!d.has_value) {
        node.any.emplace(d.key, std::move(child));
      } else if (!d.value.empty() && d.value.back() == '*') {
        node.wildcard.push_back(
            Node::Wildcard{d.key, d.value.substr(0, d.value.size() - 1), std::move(child)});
      } else {
        node.exact.emplace(d.key + '\0' + d.value, std::move(child));
      }
      if (d.has_rate_limit) {
        auto rule = std::make_unique<Rule>();
        const RateLimitSpec& s = d.rate_limit;
        rule->path = path;
        rule->unlimited = s.unlimited;
        rule->detailed_metric = d.detailed_metric;
        rule->name = s.name;
        rule->replaces = s.replaces;
        rule->unit = s.unit;
        rule->requests_per_unit = s.requests_per_unit;
        if (Status st = FinishRule(*rule, domain, s.policy, s.algorithm, s.burst, s.failure_mode,
                                   s.fallback_divisor, d.shadow_mode);
            !st.ok()) {
          return Status::InvalidArgument(config.file + ":" + std::to_string(s.line) + ": " +
                                         st.message());
        }
        c->rule = rule.get();
        rules.push_back(std::move(rule));
      }
      if (Status st = AddDescriptors(domain, *c, d.descriptors, path); !st.ok()) return st;
    }
    return Status::Ok();
  }

  // envoyproxy/ratelimit's walk: at each level the entry matches "key_value" exactly,
  // else a "value*" prefix, else a key-only descriptor; the limit applies when the last
  // entry lands on a descriptor with a rate_limit.
  const Rule* Match(const Node& root, const DescriptorRequest& d) const {
    thread_local std::string probe;
    const Node* level = &root;
    for (std::size_t i = 0; i < d.entries.size(); ++i) {
      const Entry& e = d.entries[i];
      probe.assign(e.key);
      probe.push_back('\0');
      probe.append(e.value);
      const Node* next = nullptr;
      if (auto it = level->exact.find(std::string_view(probe)); it != level->exact.end()) {
        next = it->second.get();
      }
      if (next == nullptr) {
        for (const Node::Wildcard& w : level->wildcard) {
          if (w.key == e.key && e.value.substr(0, w.prefix.size()) == w.prefix) {
            next = w.node.get();
            break;
          }
        }
      }
      if (next == nullptr) {
        if (auto it = level->any.find(e.key); it != level->any.end()) next = it->second.get();
      }
      if (next == nullptr) return nullptr;
      if (i + 1 == d.entries.size()) return next->rule;
      if (!next->HasChildren()) return nullptr;
      level = next;
    }
    return nullptr;
  }

  // The rule for a caller's override, created on first use.
  Result<const Rule*> OverrideRule(const std::string& domain, std::uint32_t rpu, int unit) {
    std::lock_guard<std::mutex> lock(overrides_mu);
    auto key = std::make_pair(rpu, unit);
    if (auto it = overrides.find(key); it != overrides.end()) return it->second.get();
    if (overrides.size() >= kMaxOverrides) {
      return Status::ResourceExhausted("too many distinct limit overrides");
    }
    auto r = std::make_unique<Rule>();
    r->path = "_override_";
    r->unit = static_cast<Unit>(unit);
    r->requests_per_unit = rpu;
    const Settings& s = config.settings;
    if (Status st =
            FinishRule(*r, domain, "", s.default_algorithm, 0, s.default_failure_mode, 1, false);
        !st.ok()) {
      return st;
    }
    const Rule* out = r.get();
    overrides.emplace(key, std::move(r));
    return out;
  }

  // A limiter holding exactly `rules` (distinct ids, sorted by id).
  Limiter* LimiterFor(std::span<const Rule* const> rules, std::unique_ptr<Limiter>& temp) {
    if (rules.size() == 1) return rules[0]->limiter.get();
    thread_local std::string id;
    id.clear();
    for (const Rule* r : rules) {
      id += r->id;
      id.push_back('\n');
    }
    {
      std::shared_lock<std::shared_mutex> lock(limiters_mu);
      if (auto it = limiters.find(std::string_view(id)); it != limiters.end()) {
        return it->second.get();
      }
    }
    std::vector<Policy> ps;
    for (const Rule* r : rules) ps.push_back(r->policy);
    auto l = MakeLimiter(std::move(ps));
    if (!l.ok()) return nullptr;
    std::unique_lock<std::shared_mutex> lock(limiters_mu);
    if (auto it = limiters.find(std::string_view(id)); it != limiters.end()) {
      return it->second.get();
    }
    if (limiters.size() >= kMaxCachedLimiters) {
      temp = std::move(*l);
      return temp.get();
    }
    Limiter* out = l->get();
    limiters.emplace(id, std::move(*l));
    return out;
  }
};

Engine::~Engine() = default;

Result<std::shared_ptr<Engine::Snapshot>> Engine::Compile(const Config& config) {
  auto s = std::make_shared<Snapshot>();
  s->config = config;
  s->store = store_;
  s->clock = clock_;
  s->metrics = metrics_;
  s->retired = retired_;
  for (const DomainSpec& d : config.domains) {
    Node& root = s->domains[d.domain];
    if (Status st = s->AddDescriptors(d.domain, root, d.descriptors, ""); !st.ok()) return st;
  }
  return s;
}

Result<std::unique_ptr<Engine>> Engine::Create(const Config& config, Options options) {
  if (!options.store) return Status::InvalidArgument("engine needs a store");
  std::unique_ptr<Engine> e(new Engine());
  e->metrics_ = std::make_shared<Metrics>();
  e->store_ = std::make_shared<TimedStore>(std::move(options.store), e->metrics_);
  e->clock_ = options.clock ? std::move(options.clock) : std::make_shared<SteadyEpochClock>();
  e->retired_ = std::make_shared<Retired>();
  auto snap = e->Compile(config);
  if (!snap.ok()) return snap.status();
  (*snap)->generation = e->generation_.fetch_add(1) + 1;
  std::atomic_store(&e->snapshot_, std::move(*snap));
  return e;
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
  return std::atomic_load(&snapshot_)->config.settings;
}

std::shared_ptr<const Settings> Engine::settings_ptr() const {
  std::shared_ptr<Snapshot> snap = std::atomic_load(&snapshot_);
  return std::shared_ptr<const Settings>(snap, &snap->config.settings);
}

EngineStats Engine::Stats() const {
  auto snap = std::atomic_load(&snapshot_);
  EngineStats st;
  st.limiter = snap->LiveStats();
  {
    std::lock_guard<std::mutex> lock(retired_->mu);
    AddStats(st.limiter, retired_->stats);
  }
  st.generation = snap->generation;
  st.domains = snap->domains.size();
  st.rules = snap->rules.size();
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
  out.append("# HELP sluiced_config_generation Generation of the configuration in use.\n");
  out.append("# TYPE sluiced_config_generation gauge\n");
  line("sluiced_config_generation", "", st.generation);
  out.append("# HELP sluiced_config_rules Limits in the configuration in use.\n");
  out.append("# TYPE sluiced_config_rules gauge\n");
  line("sluiced_config_rules", "", st.rules);
  return out;
}

Status Engine::ShouldRateLimit(const RateLimitRequest& req, RateLimitResponse* resp) {
  std::shared_ptr<Snapshot> snap = std::atomic_load(&snapshot_);
  const Settings& settings = snap->config.settings;
  resp->overall_code = Code::kOk;
  resp->statuses.clear();
  resp->response_headers.clear();
  if (req.domain.empty()) return Status::InvalidArgument("domain must not be empty");
  const std::size_t n = req.descriptors.size();
  if (n == 0) return Status::InvalidArgument("descriptors must not be empty");
  if (n > settings.max_descriptors) {
    return Status::InvalidArgument("too many descriptors: " + std::to_string(n) + " (at most " +
                                   std::to_string(settings.max_descriptors) + ")");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const DescriptorRequest& d = req.descriptors[i];
    if (d.entries.empty()) {
      return Status::InvalidArgument("descriptor " + std::to_string(i) + " has no entries");
    }
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
      if (d.override_unit < 1 || d.override_unit > 4) {
        return Status::InvalidArgument("descriptor " + std::to_string(i) +
                                       ": limit override unit must be SECOND, MINUTE, HOUR or DAY");
      }
    }
  }
  resp->statuses.resize(n);

  auto dom = snap->domains.find(req.domain);
  if (dom == snap->domains.end()) {
    // Like envoyproxy/ratelimit: a domain without configuration limits nothing.
    snap->metrics->CountUnknownDomain();
    return Status::Ok();
  }

  // 1. Match every descriptor to a rule.
  const Rule* matched[kMaxChecks] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const DescriptorRequest& d = req.descriptors[i];
    if (d.has_override) {
      auto r = snap->OverrideRule(dom->first, d.override_requests_per_unit, d.override_unit);
      if (!r.ok()) return Status::InvalidArgument(r.status().message());
      matched[i] = *r;
    } else {
      matched[i] = snap->Match(dom->second, d);
    }
  }
  // 2. Limits replaced by another matched limit do not apply.
  for (std::size_t i = 0; i < n; ++i) {
    if (matched[i] == nullptr || matched[i]->replaces.empty()) continue;
    for (const std::string& name : matched[i]->replaces) {
      for (std::size_t j = 0; j < n; ++j) {
        if (j != i && matched[j] != nullptr && matched[j]->name == name) matched[j] = nullptr;
      }
    }
  }

  // 3. Build the checks: shadow limits are decided in their own batch, so a would-be
  // denial by a shadow limit never holds back the enforced ones.
  thread_local std::string keys[kMaxChecks];
  struct Item {
    const Rule* rule = nullptr;
    std::uint64_t cost = 0;
    int check = -1;  // index into the batch's checks
    bool shadow = false;
  };
  Item items[kMaxChecks];
  for (std::size_t i = 0; i < n; ++i) {
    const Rule* r = matched[i];
    if (r == nullptr) continue;
    if (r->unlimited) {
      resp->statuses[i].limit_remaining = std::numeric_limits<std::uint32_t>::max();
      r->counters->unlimited.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const DescriptorRequest& d = req.descriptors[i];
    items[i].rule = r;
    items[i].cost = d.has_hits_addend ? d.hits_addend : (req.hits_addend ? req.hits_addend : 1);
    items[i].shadow = r->policy.shadow;
    std::string& k = keys[i];
    k.clear();
    AppendEscaped(k, req.domain);
    for (const Entry& e : d.entries) {
      k.push_back(':');
      AppendEscaped(k, e.key);
      k.push_back(':');
      AppendEscaped(k, e.value);
    }
    if (k.size() > kMaxKeyBytes) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "h.%016llx%016llx",
                    static_cast<unsigned long long>(Fnv(k, 0xcbf29ce484222325ULL)),
                    static_cast<unsigned long long>(Fnv(k, 0x84222325cbf29ce4ULL)));
      k = buf;
    }
  }

  Decision decisions[kMaxChecks];
  for (int pass = 0; pass < 2; ++pass) {
    const bool shadow_pass = pass == 1;
    Check checks[kMaxChecks];
    std::uint64_t costs[kMaxChecks];
    const Rule* rules_of_check[kMaxChecks];
    std::size_t nchecks = 0;
    bool too_big = false;
    for (std::size_t i = 0; i < n; ++i) {
      Item& it = items[i];
      if (it.rule == nullptr || it.shadow != shadow_pass) continue;
      // The same limit on the same key twice in one request: one check, costs added.
      for (std::size_t c = 0; c < nchecks; ++c) {
        if (rules_of_check[c] == it.rule && checks[c].key == keys[i])
          it.check = static_cast<int>(c);
      }
      if (it.check >= 0) {
        costs[it.check] += it.cost;
        continue;
      }
      it.check = static_cast<int>(nchecks);
      rules_of_check[nchecks] = it.rule;
      checks[nchecks].key = keys[i];
      costs[nchecks] = it.cost;
      ++nchecks;
    }
    if (nchecks == 0) continue;
    // Distinct rules, ordered by id, make the limiter; checks name their policy index.
    const Rule* set[kMaxChecks];
    std::size_t nset = 0;
    for (std::size_t c = 0; c < nchecks; ++c) {
      bool seen = false;
      for (std::size_t j = 0; j < nset; ++j) seen = seen || set[j]->id == rules_of_check[c]->id;
      if (!seen) set[nset++] = rules_of_check[c];
    }
    std::sort(set, set + nset, [](const Rule* a, const Rule* b) { return a->id < b->id; });
    for (std::size_t c = 0; c < nchecks; ++c) {
      for (std::size_t j = 0; j < nset; ++j) {
        if (set[j]->id == rules_of_check[c]->id) checks[c].policy = j;
      }
      too_big = too_big || costs[c] > rules_of_check[c]->policy.Capacity();
    }
    // A cost no limit could ever grant: report over limit without consuming anything
    // (the other checks are peeked so their statuses are still accurate).
    for (std::size_t c = 0; c < nchecks; ++c) {
      checks[c].cost = too_big ? 0 : costs[c];
    }
    std::unique_ptr<Limiter> temp;
    Limiter* limiter = snap->LimiterFor(std::span<const Rule* const>(set, nset), temp);
    if (limiter == nullptr) return Status::Internal("could not build a limiter");
    Decision out[kMaxChecks];
    auto r = limiter->Acquire(std::span<const Check>(checks, nchecks),
                              std::span<Decision>(out, nchecks));
    if (!r.ok()) return r.status();
    for (std::size_t c = 0; c < nchecks; ++c) {
      if (too_big && costs[c] > rules_of_check[c]->policy.Capacity()) {
        out[c].allowed = rules_of_check[c]->policy.shadow;
        out[c].shadow_denied = rules_of_check[c]->policy.shadow;
        out[c].retry_after = rules_of_check[c]->policy.window;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (items[i].rule != nullptr && items[i].shadow == shadow_pass) {
        decisions[i] = out[items[i].check];
      }
    }
  }

  // 4. Statuses, metrics and headers.
  int binding = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const Item& it = items[i];
    if (it.rule == nullptr) continue;
    const Rule& r = *it.rule;
    const Decision& d = decisions[i];
    DescriptorStatus& st = resp->statuses[i];
    st.has_limit = true;
    st.requests_per_unit = r.requests_per_unit;
    st.unit = r.unit;
    st.name = r.name;
    st.limit_remaining = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(d.remaining, std::numeric_limits<std::uint32_t>::max()));
    st.duration_until_reset = d.reset_after;
    st.retry_after = d.retry_after;
    st.code = d.allowed ? Code::kOk : Code::kOverLimit;
    DescriptorCounters* c = r.counters;
    if (r.detailed_metric) {
      std::string label = r.path;
      for (const Entry& e : req.descriptors[i].entries) {
        label += "|";
        label.append(e.key);
        label += "=";
        label.append(e.value);
      }
      c = snap->metrics->Descriptor(req.domain, label);
    }
    if (!d.allowed) {
      c->over_limit.fetch_add(1, std::memory_order_relaxed);
      resp->overall_code = Code::kOverLimit;
    } else if (d.shadow_denied) {
      c->shadow_over_limit.fetch_add(1, std::memory_order_relaxed);
    } else {
      c->ok.fetch_add(1, std::memory_order_relaxed);
      const double used = static_cast<double>(d.limit - std::min(d.limit, d.remaining));
      if (d.limit > 0 &&
          used > std::floor(settings.near_limit_ratio * static_cast<double>(d.limit))) {
        c->near_limit.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (binding < 0) {
      binding = static_cast<int>(i);
    } else {
      const DescriptorStatus& b = resp->statuses[binding];
      if (st.code == Code::kOverLimit
              ? (b.code != Code::kOverLimit || st.retry_after > b.retry_after)
              : (b.code != Code::kOverLimit && st.limit_remaining < b.limit_remaining)) {
        binding = static_cast<int>(i);
      }
    }
  }
  if (settings.response_headers && binding >= 0) {
    const DescriptorStatus& b = resp->statuses[binding];
    auto& h = resp->response_headers;
    h.emplace_back("x-ratelimit-limit", std::to_string(b.requests_per_unit));
    h.emplace_back("x-ratelimit-remaining", std::to_string(b.limit_remaining));
    h.emplace_back("x-ratelimit-reset", CeilSeconds(b.duration_until_reset));
    if (b.code == Code::kOverLimit) h.emplace_back("retry-after", CeilSeconds(b.retry_after));
  }
  return Status::Ok();
}

}  // namespace sluice::service
