// The admin listener's JSON answers (service/admin_api.h).
#include "service/admin_api.h"

#include <functional>
#include <memory>

#include "service/admin_top_keys.h"
#include "service/params.h"
#include "service/plan.h"

namespace sluice::service::admin {
namespace {

using nlohmann::json;

std::int64_t Ms(Micros us) {
  return (us + 999) / 1000;
}

// Every rule of every domain of `rules`, in tree order (a descriptor's limits in list
// order).
void ForEachRule(const RuleSet& rules, const std::function<void(const Rule&)>& fn) {
  std::function<void(const Node&)> walk = [&](const Node& n) {
    for (const Rule* r = n.rule; r != nullptr; r = r->next) fn(*r);
    for (const auto& [k, child] : n.exact) walk(*child);
    for (const auto& w : n.wildcard) walk(*w.node);
    for (const auto& [k, child] : n.any) walk(*child);
  };
  for (const DomainSpec& d : rules.config().domains) {
    if (const Node* root = rules.Domain(d.domain)) walk(*root);
  }
}

json RuleJson(const Rule& r) {
  const Policy& p = r.policy;
  json j = {{"domain", r.domain},
            {"rule", r.path},
            {"name", r.name},
            {"unlimited", r.unlimited},
            {"banned", r.banned},
            {"algorithm", AlgorithmName(p.algorithm)},
            {"policy", p.name},
            {"failure_mode", FailureModeName(p.failure_mode)},
            {"shadow", p.shadow},
            {"quota_mode", r.quota_mode},
            {"detailed_metric", r.detailed_metric},
            {"replaces", r.replaces}};
  if (!r.unlimited) {
    j["capacity"] = p.Capacity();
    j["window_ms"] = Ms(p.window);
    j["requests_per_unit"] = r.requests_per_unit;
    j["unit"] = UnitName(r.unit);
    if (r.unit_multiplier != 1) j["unit_multiplier"] = r.unit_multiplier;
  }
  if (p.algorithm == Algorithm::kConcurrency) j["concurrency"] = true;
  if (p.block_for > 0) j["block_for_ms"] = Ms(p.block_for);
  if (p.lease > 0) j["lease"] = p.lease;
  return j;
}

json DecisionJson(const Decision& d, const Policy& p) {
  json j = {{"allowed", d.allowed},
            {"limit", d.limit},
            {"remaining", d.remaining},
            {"reset_after_ms", Ms(d.reset_after)},
            {"retry_after_ms", Ms(d.retry_after)}};
  if (p.shadow) j["shadow_denied"] = !d.allowed || d.shadow_denied;
  if (p.algorithm == Algorithm::kConcurrency) j["permits_held"] = d.limit - d.remaining;
  return j;
}

// A request planned on the current snapshot, the snapshot kept alive by `rules`. The
// plan's metric series go to a scratch Metrics: looking counts nothing.
struct Planned {
  std::shared_ptr<const RuleSet> rules;
  std::uint64_t generation = 0;
  Metrics scratch;
  Plan plan;
};

Result<std::unique_ptr<Planned>> PlanFor(const Engine& engine, const RateLimitRequest& req) {
  auto p = std::make_unique<Planned>();
  p->rules = engine.rules(&p->generation);
  // As /v1/acquire plans: concurrency limits are looked at too.
  const PlanOp op{.permit = true, .op = StoreOp::kDecide, .permit_id = {}};
  if (Status s = BuildPlan(*p->rules, p->scratch, req, op, p->plan); !s.ok()) return s;
  return p;
}

// Peeks every check of `plan` at the store: cost 0, no permit. Ok or the store's error.
Status PeekAll(Engine& engine, const Plan& plan, Decision* out) {
  if (plan.nchecks == 0) return Status::Ok();
  StoreCheck checks[kMaxChecks];
  for (std::size_t c = 0; c < plan.nchecks; ++c) {
    checks[c] = StoreCheck{.policy = plan.checks[c].policy, .key = plan.checks[c].key, .cost = 0};
  }
  return engine.PeekStore(std::span<const StoreCheck>(checks, plan.nchecks),
                          std::span<Decision>(out, plan.nchecks));
}

// The rule slot `a` of descriptor `i` matched before `replaces` were applied.
const Rule* MatchedRule(const Planned& pl, const RateLimitRequest& req, std::size_t i,
                        std::size_t a) {
  const Plan& p = pl.plan;
  if (req.descriptors[i].has_override) return p.overrides ? &p.overrides[i] : nullptr;
  const Node* root = pl.rules->Domain(req.domain);
  if (root == nullptr) return nullptr;
  const Rule* r = RuleSet::Match(*root, req.descriptors[i].entries);
  for (std::size_t k = p.first[i]; r != nullptr && k < a; ++k) r = r->next;
  return r;
}

// The name of a matched limit whose `replaces` names `r`.
std::string ReplacedBy(const Planned& pl, const RateLimitRequest& req, const Rule& r) {
  const Plan& p = pl.plan;
  for (std::size_t b = 0; b < p.nslots; ++b) {
    const Rule* o = p.rule[b];
    if (o == nullptr || o == &r) continue;
    for (const std::string& name : o->replaces) {
      if (name == r.name) return o->name.empty() ? o->path : o->name;
    }
  }
  (void)req;
  return "another matched limit";
}

json EntriesJson(const DescriptorRequest& d) {
  json out = json::array();
  for (const Entry& e : d.entries) out.push_back({{"key", e.key}, {"value", e.value}});
  return out;
}

json SlotJson(const Planned& pl, const RateLimitRequest& req, std::size_t i, std::size_t a,
              const Decision* peeks, const Status& peeked, bool* over) {
  const Plan& p = pl.plan;
  const Rule* matched = MatchedRule(pl, req, i, a);
  const Rule* r = p.rule[a];
  json j = matched != nullptr ? RuleJson(*matched) : json::object();
  if (r == nullptr) {
    j["replaced"] = true;
    if (matched != nullptr) j["replaced_by"] = ReplacedBy(pl, req, *matched);
    return j;
  }
  j["replaced"] = false;
  if (r->unlimited) return j;
  if (r->banned) {
    j["decision"] = {{"allowed", r->policy.shadow}, {"banned", true}};
    *over = *over || !r->policy.shadow;
    return j;
  }
  const int c = p.check[a];
  if (c < 0) return j;
  j["store_key"] = p.keys[c];
  j["cost"] = p.checks[c].cost;
  if (!peeked.ok()) {
    j["store_error"] = peeked.message();
    return j;
  }
  j["decision"] = DecisionJson(peeks[c], r->policy);
  if (!peeks[c].allowed && !r->policy.shadow && !r->quota_mode) *over = true;
  return j;
}

// The domain and entries of a descriptor part of a store key (DescriptorPartOf): the
// escaped "domain:key:value..." escaped once more; null for a hashed (long) key.
json DecodeDescriptorPart(const std::string& part) {
  std::string once;
  if (part.empty() || part.starts_with("h.") || !PercentDecode(part, false, &once)) return nullptr;
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (;;) {
    const std::size_t colon = once.find(':', from);
    std::string decoded;
    if (!PercentDecode(std::string_view(once).substr(from, colon - from), false, &decoded)) {
      return nullptr;
    }
    parts.push_back(std::move(decoded));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  if (parts.size() % 2 == 0) return nullptr;
  json entries = json::array();
  for (std::size_t k = 1; k + 1 < parts.size(); k += 2) {
    entries.push_back({{"key", parts[k]}, {"value", parts[k + 1]}});
  }
  return json{{"domain", parts[0]}, {"entries", entries}};
}

}  // namespace

json Limits(const Engine& engine) {
  std::uint64_t generation = 0;
  const auto rules = engine.rules(&generation);
  json list = json::array();
  ForEachRule(*rules, [&](const Rule& r) { list.push_back(RuleJson(r)); });
  return {{"generation", generation}, {"file", rules->config().file}, {"limits", list}};
}

Result<json> Explain(Engine& engine, const RateLimitRequest& req) {
  auto planned = PlanFor(engine, req);
  if (!planned.ok()) return planned.status();
  const Planned& pl = **planned;
  Decision peeks[kMaxChecks];
  const Status peeked = PeekAll(engine, pl.plan, peeks);
  bool over = false;
  json descriptors = json::array();
  for (std::size_t i = 0; i < pl.plan.n; ++i) {
    json limits = json::array();
    for (std::size_t a = pl.plan.first[i]; a < pl.plan.first[i] + pl.plan.count[i]; ++a) {
      limits.push_back(SlotJson(pl, req, i, a, peeks, peeked, &over));
    }
    descriptors.push_back({{"entries", EntriesJson(req.descriptors[i])}, {"limits", limits}});
  }
  json out = {{"domain", req.domain},
              {"generation", pl.generation},
              {"known_domain", pl.rules->Domain(req.domain) != nullptr},
              {"descriptors", descriptors},
              {"would_be", over ? "OVER_LIMIT" : "OK"},
              {"charged", false}};
  if (!peeked.ok()) out["store_error"] = peeked.message();
  return out;
}

Result<json> Counters(Engine& engine, const RateLimitRequest& req) {
  auto planned = PlanFor(engine, req);
  if (!planned.ok()) return planned.status();
  const Planned& pl = **planned;
  Decision peeks[kMaxChecks];
  if (Status s = PeekAll(engine, pl.plan, peeks); !s.ok()) return s;
  json keys = json::array();
  for (std::size_t a = 0; a < pl.plan.nslots; ++a) {
    const Rule* r = pl.plan.rule[a];
    const int c = pl.plan.check[a];
    if (r == nullptr || c < 0) continue;
    json k = DecisionJson(peeks[c], r->policy);
    k["store_key"] = pl.plan.keys[c];
    k["rule"] = r->path;
    k["name"] = r->name;
    k["policy"] = r->policy.name;
    k["algorithm"] = AlgorithmName(r->policy.algorithm);
    k["used"] = peeks[c].limit - std::min(peeks[c].limit, peeks[c].remaining);
    keys.push_back(std::move(k));
  }
  return json{{"domain", req.domain}, {"generation", pl.generation}, {"keys", keys}};
}

Result<json> Reset(Engine& engine, const RateLimitRequest& req, std::vector<std::string>* keys) {
  auto planned = PlanFor(engine, req);
  if (!planned.ok()) return planned.status();
  const Planned& pl = **planned;
  if (pl.plan.nchecks == 0) {
    return Status::InvalidArgument("the descriptor matches no limit with a store key in domain '" +
                                   std::string(req.domain) + "': nothing to reset");
  }
  json out = json::array();
  std::vector<bool> done(pl.plan.nchecks, false);
  for (std::size_t a = 0; a < pl.plan.nslots; ++a) {
    const Rule* r = pl.plan.rule[a];
    const int c = pl.plan.check[a];
    if (r == nullptr || c < 0 || done[c]) continue;
    done[c] = true;
    if (Status s = engine.ResetKey(*r, pl.plan.keys[c]); !s.ok()) return s;
    keys->push_back(pl.plan.keys[c]);
    out.push_back({{"store_key", pl.plan.keys[c]}, {"rule", r->path}, {"name", r->name}});
  }
  return json{{"reset", out}};
}

json TopKeysJson(const Engine& engine, std::size_t n) {
  const auto rules = engine.rules();
  const Micros now = engine.clock().Now();
  json list = json::array();
  ForEachRule(*rules, [&](const Rule& r) {
    if (r.counters == nullptr) return;
    const TopKeys* top = r.counters->top.load(std::memory_order_acquire);
    if (top == nullptr) return;
    json keys = json::array();
    for (const TopKeys::Entry& e : top->Top(n)) {
      json k = {{"key", e.key},
                {"denials", e.count},
                {"error", e.error},
                {"last_denied_ms_ago", Ms(now > e.last ? now - e.last : 0)}};
      if (e.truncated) k["truncated"] = true;
      json entries = DecodeDescriptorPart(e.truncated ? std::string() : e.key);
      if (!entries.is_null()) {
        k["domain"] = entries["domain"];
        k["entries"] = entries["entries"];
      }
      keys.push_back(std::move(k));
    }
    list.push_back({{"domain", r.domain},
                    {"rule", r.path},
                    {"name", r.name},
                    {"denials", top->total()},
                    {"keys", keys}});
  });
  return {{"counters_per_rule", TopKeys::kCounters}, {"rules", list}};
}

json Stats(Engine& engine, bool store_reachable) {
  std::uint64_t generation = 0;
  const auto rules = engine.rules(&generation);
  json list = json::array();
  ForEachRule(*rules, [&](const Rule& r) {
    json j = {{"domain", r.domain}, {"rule", r.path}, {"name", r.name}};
    if (const DescriptorCounters* c = r.counters) {
      j["ok"] = c->ok.load(std::memory_order_relaxed);
      j["over_limit"] = c->over_limit.load(std::memory_order_relaxed);
      j["near_limit"] = c->near_limit.load(std::memory_order_relaxed);
      j["shadow_over_limit"] = c->shadow_over_limit.load(std::memory_order_relaxed);
      j["quota_over_limit"] = c->quota_over_limit.load(std::memory_order_relaxed);
      j["unlimited"] = c->unlimited.load(std::memory_order_relaxed);
      j["key_cap"] = c->key_cap.load(std::memory_order_relaxed);
    }
    list.push_back(std::move(j));
  });
  const EngineStats st = engine.Stats();
  const LimiterStats& l = st.limiter;
  const Metrics& m = engine.metrics();
  const std::uint64_t calls = m.store_calls();
  json store = {{"reachable", store_reachable},
                {"calls", calls},
                {"mean_latency_us", calls == 0 ? 0.0
                                               : static_cast<double>(m.store_latency_sum_us()) /
                                                     static_cast<double>(calls)},
                {"errors", l.store_errors},
                {"fail_open", l.fail_open},
                {"fail_closed", l.fail_closed},
                {"local_fallback", l.local_fallback},
                {"deny_cache_hits", l.deny_cache_hits},
                {"lease_hits", l.lease_hits},
                {"lease_grants", l.lease_grants},
                {"lease_returns", l.lease_returns}};
  return {{"generation", generation}, {"decisions", l.decisions},
          {"denied", l.denied},       {"rules", list},
          {"store", store},           {"top_keys_bytes", TopKeysBytes()}};
}

}  // namespace sluice::service::admin
