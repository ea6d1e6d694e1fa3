// The plan step: validate, match, drop replaced limits, build keys and costs.
#include "service/plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/hash.h"
#include "limiter/limiter_internal.h"
#include "sluice/key.h"

namespace sluice::service {
namespace {

std::string Where(std::size_t i) {
  return "descriptor " + std::to_string(i);
}

// The shape of the request, before any rule is looked at.
Status ValidateRequest(const Settings& settings, const RateLimitRequest& req) {
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
      return Status::InvalidArgument(Where(i) + " has " + std::to_string(d.entries.size()) +
                                     " entries (at most " + std::to_string(settings.max_entries) +
                                     ")");
    }
    for (const Entry& e : d.entries) {
      if (e.key.empty())
        return Status::InvalidArgument(Where(i) + " has an entry with an empty key");
    }
    if (d.has_override) {
      if (d.override_requests_per_unit == 0) {
        return Status::InvalidArgument(Where(i) + ": limit override needs requests_per_unit > 0");
      }
      if (!ValidUnit(d.override_unit)) {
        return Status::InvalidArgument(
            Where(i) +
            ": limit override unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR");
      }
    }
  }
  return Status::Ok();
}

// The limits the request's descriptors match from descriptor `from` on, for the error
// of a request that matches more than one batch holds.
std::size_t CountLimits(const Node& root, const RateLimitRequest& req, std::size_t from) {
  std::size_t total = 0;
  for (std::size_t k = from; k < req.descriptors.size(); ++k) {
    const DescriptorRequest& o = req.descriptors[k];
    if (o.entries.empty()) continue;
    if (o.has_override) {
      ++total;
      continue;
    }
    for (const Rule* x = RuleSet::Match(root, o.entries); x != nullptr; x = x->next) ++total;
  }
  return total;
}

// 1. Every descriptor to its rules; a caller's override makes a rule of its own (no
// state is kept per override).
Status MatchSlots(const RuleSet& rules, const Node& root, const RateLimitRequest& req, Plan& p) {
  p.nslots = 0;
  for (std::size_t i = 0; i < p.n; ++i) {
    const DescriptorRequest& d = req.descriptors[i];
    p.first[i] = static_cast<std::uint8_t>(p.nslots);
    p.count[i] = 0;
    if (d.entries.empty()) continue;  // envoyproxy/ratelimit: no entries, no limit (OK)
    const Rule* r = nullptr;
    if (d.has_override) {
      if (!p.overrides) p.overrides = std::make_unique<Rule[]>(kMaxChecks);
      Status s = rules.OverrideRule(req.domain, d.override_requests_per_unit, d.override_unit,
                                    p.overrides[i]);
      if (!s.ok()) return Status::InvalidArgument(Where(i) + ": " + s.message());
      r = &p.overrides[i];
    } else {
      r = RuleSet::Match(root, d.entries);
    }
    for (; r != nullptr; r = r->next) {
      if (p.nslots == kMaxChecks) {
        std::size_t total = p.nslots + CountLimits(root, req, i + 1);
        for (const Rule* x = r; x != nullptr; x = x->next) ++total;
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
  return Status::Ok();
}

// 2. Limits replaced by another matched limit do not apply.
void ApplyReplaces(Plan& p) {
  for (std::size_t a = 0; a < p.nslots; ++a) {
    if (p.rule[a] == nullptr || p.rule[a]->replaces.empty()) continue;
    for (const std::string& name : p.rule[a]->replaces) {
      for (std::size_t b = 0; b < p.nslots; ++b) {
        if (b != a && p.rule[b] != nullptr && p.rule[b]->name == name) p.rule[b] = nullptr;
      }
    }
  }
}

// The counters a slot's decision is counted in: its rule's, or with detailed_metric /
// value_to_metric a series naming the request's values.
DescriptorCounters* SlotCounters(Metrics& metrics, std::string_view domain, const Rule& r,
                                 const DescriptorRequest& d, const Node* const* path,
                                 bool value_to_metric) {
  if (!r.detailed_metric && !value_to_metric) return r.counters;
  std::string label = r.path;
  for (std::size_t k = 0; k < d.entries.size(); ++k) {
    if (!r.detailed_metric && !(path != nullptr && path[k]->value_to_metric)) continue;
    const Entry& e = d.entries[k];
    label += "|";
    label.append(e.key);
    label += "=";
    label.append(e.value);
  }
  return metrics.Descriptor(domain, label);
}

// The cost a descriptor charges each of its limits: its own hits_addend, else the
// request's, else 1.
std::uint64_t DescriptorCost(const RateLimitRequest& req, const DescriptorRequest& d) {
  return d.has_hits_addend ? d.hits_addend : (req.hits_addend ? req.hits_addend : 1);
}

Status ConcurrencyOnRateApi(std::size_t i, const Rule& r) {
  // A permit taken here could never be given back (Envoy's rate limit API, /json,
  // /v1/check and nginx have no release): refuse, naming the way that works.
  return Status::InvalidArgument(
      Where(i) + " matches the concurrency limit " + r.path +
      (r.name.empty() ? "" : " ('" + r.name + "')") +
      ", which this API cannot release: take permits with POST /v1/acquire and give "
      "them back with POST /v1/release");
}

// Adds slot `a` (rule `r`, key `key`, cost `cost`) to the plan's checks: a new check,
// or the costs added to the check of the same limit on the same key.
Status AddCheck(Plan& p, std::size_t a, const Rule& r, std::string_view key, std::uint64_t cost) {
  const bool concurrency = r.policy.algorithm == Algorithm::kConcurrency;
  std::string& store_key = p.keys[p.nchecks];
  limiter_internal::BuildStoreKey(store_key, "sluiced", key, r.policy.name);
  for (std::size_t c = 0; c < p.nchecks; ++c) {
    if (p.checks[c].key == store_key) p.check[a] = static_cast<int>(c);
  }
  if (p.check[a] >= 0) {
    // One permit per key. Costs add up, saturating: a sum past 2^64-1 is above every
    // capacity and denied as each cost alone is (it wrapped to a small cost, or to 0, a
    // peek: issue #20 item 3).
    std::uint64_t& sum = p.checks[p.check[a]].cost;
    if (!concurrency)
      sum = cost > std::numeric_limits<std::uint64_t>::max() - sum
                ? std::numeric_limits<std::uint64_t>::max()
                : sum + cost;
    return Status::Ok();
  }
  p.check[a] = static_cast<int>(p.nchecks);
  decide::Check& c = p.checks[p.nchecks++];
  c = decide::Check{.policy = &r.policy, .fallback = &r.fallback, .key = store_key, .cost = cost};
  if (concurrency) {
    // One permit (a slot) per acquisition, whatever the request's hits.
    c.cost = 1;
    c.permit = p.permit_id;
    p.lease = p.nconcurrency == 0 ? r.policy.window : std::min(p.lease, r.policy.window);
    ++p.nconcurrency;
  }
  return Status::Ok();
}

// 3. One check per distinct (rule, key) of descriptor `i`. The limits of one
// descriptor share its key (and so its cluster slot: one store call) and differ by
// policy name.
Status BuildChecks(Metrics& metrics, const Node& root, const RateLimitRequest& req, std::size_t i,
                   Plan& p) {
  bool any = false;
  for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) any = any || p.rule[a];
  if (!any) return Status::Ok();
  const DescriptorRequest& d = req.descriptors[i];
  // The nodes each entry landed on: share_threshold and value_to_metric are per level.
  const Node* path[kMaxEntries];
  const bool matched_tree = !d.has_override && d.entries.size() <= kMaxEntries;
  if (matched_tree) RuleSet::Match(root, d.entries, path);
  bool value_to_metric = false;
  for (std::size_t k = 0; matched_tree && k < d.entries.size(); ++k) {
    value_to_metric = value_to_metric || path[k]->value_to_metric;
  }
  const Node* const* levels = matched_tree ? path : nullptr;
  thread_local std::string key;
  bool key_built = false;
  const std::uint64_t cost = DescriptorCost(req, d);
  for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) {
    const Rule* r = p.rule[a];
    if (r == nullptr) continue;
    const bool concurrency = !r->unlimited && r->policy.algorithm == Algorithm::kConcurrency;
    if (concurrency && !p.permit_mode) return ConcurrencyOnRateApi(i, *r);
    if (!concurrency && p.permit_mode && p.op != StoreOp::kDecide) {
      p.rule[a] = nullptr;  // a release or an extend leaves rate limits alone
      continue;
    }
    p.counters[a] = SlotCounters(metrics, req.domain, *r, d, levels, value_to_metric);
    if (r->unlimited || r->banned) continue;  // decided without the store
    if (!key_built) {
      key_built = true;
      BuildDescriptorKey(req.domain, d, levels, key);
    }
    if (Status s = AddCheck(p, a, *r, key, cost); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

void BuildDescriptorKey(std::string_view domain, const DescriptorRequest& d,
                        const Node* const* path, std::string& key) {
  key.clear();
  AppendEscaped(key, domain);
  for (std::size_t k = 0; k < d.entries.size(); ++k) {
    const Entry& e = d.entries[k];
    key.push_back(':');
    AppendEscaped(key, e.key);
    key.push_back(':');
    // share_threshold: the pattern, not the value, so matching values share a counter.
    if (path != nullptr && !path[k]->shared_pattern.empty()) {
      AppendEscaped(key, path[k]->shared_pattern);
    } else {
      AppendEscaped(key, e.value);
    }
  }
  if (key.size() > kMaxKeyBytes) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "h.%016llx%016llx",
                  static_cast<unsigned long long>(Fnv1a64(key, kFnvOffset)),
                  static_cast<unsigned long long>(Fnv1a64(key, kFnvOffsetAlt)));
    key = buf;
  }
}

Status BuildPlan(const RuleSet& rules, Metrics& metrics, const RateLimitRequest& req,
                 const PlanOp& op, Plan& p) {
  p.permit_mode = op.permit;
  p.op = op.permit ? op.op : StoreOp::kDecide;
  p.permit_id.assign(op.permit_id);
  p.nconcurrency = 0;
  p.lease = 0;
  p.n = 0;
  p.nslots = 0;
  p.nchecks = 0;
  if (Status s = ValidateRequest(rules.config().settings, req); !s.ok()) return s;
  p.n = req.descriptors.size();
  const Node* root = rules.Domain(req.domain);
  if (root == nullptr) {
    // Like envoyproxy/ratelimit: a domain without configuration limits nothing.
    std::fill(p.count, p.count + p.n, std::uint8_t{0});
    metrics.CountUnknownDomain();
    return Status::Ok();
  }
  if (Status s = MatchSlots(rules, *root, req, p); !s.ok()) return s;
  ApplyReplaces(p);
  for (std::size_t i = 0; i < p.n; ++i) {
    if (Status s = BuildChecks(metrics, *root, req, i, p); !s.ok()) return s;
  }
  // Keys are views into p.keys, which the loop above may still have grown: set them
  // once every key is final.
  for (std::size_t c = 0; c < p.nchecks; ++c) {
    p.checks[c].key = p.keys[c];
    p.checks[c].skip_deny_cache = req.skip_deny_cache;
  }
  // A request an enforced ban denies takes nothing from its other rate limits (denied
  // requests do not consume): they only look, and report what remains.
  bool banned = false;
  for (std::size_t a = 0; a < p.nslots; ++a) {
    banned = banned || (p.rule[a] != nullptr && p.rule[a]->banned && !p.rule[a]->policy.shadow);
  }
  for (std::size_t c = 0; banned && c < p.nchecks; ++c) {
    const Policy& pol = *p.checks[c].policy;
    if (!pol.shadow && pol.algorithm != Algorithm::kConcurrency) p.checks[c].cost = 0;
  }
  return Status::Ok();
}

}  // namespace sluice::service
