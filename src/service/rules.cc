// Compiling a Config into descriptor trees and matching request descriptors to rules.
#include "service/rules.h"

#include <algorithm>
#include <cctype>

#include "decide/decider.h"

namespace sluice::service {
namespace {

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
    case Algorithm::kConcurrency:
      return "conc";
    default:
      return "gcra";
  }
}

}  // namespace

Status RuleSet::FinishRule(Rule& r, const RateLimitSpec& spec, bool shadow) const {
  if (r.unlimited) return Status::Ok();
  Policy& p = r.policy;
  p = PolicyOf(spec);
  p.shadow = shadow || r.quota_mode || config_.settings.shadow_mode;
  // requests_per_unit 0: a ban, decided without a counter (no store policy to name).
  r.banned = spec.requests_per_unit == 0 && spec.algorithm != Algorithm::kConcurrency;
  if (r.banned) {
    p.name = "banned";
    return Status::Ok();
  }
  const Algorithm algorithm = spec.algorithm;
  // The name carries every parameter that shapes the stored state, so a changed limit
  // starts afresh while an unchanged one keeps its counters across reloads. With
  // `on_change` (carry-over) it does not: a changed limit keeps the key and the store
  // converts its state by that mode (docs/sluiced.md, "Changing a limit").
  const std::string params =
      spec.on_change ? std::string("oc.") + AlgorithmCode(algorithm)
                     : std::string(AlgorithmCode(algorithm)) + "." + std::to_string(p.limit) + "." +
                           std::to_string(p.window / 1000) + "." + std::to_string(p.burst);
  // Two limits with equal parameters but different failure modes can meet in one
  // request: the mode joins the name unless it is the default, so their store keys
  // differ.
  std::string mode;
  if (p.failure_mode == FailureMode::kFailClosed) mode = ".fc";
  if (p.failure_mode == FailureMode::kLocalFallback)
    mode = ".lf" + std::to_string(p.fallback_divisor);
  p.name = (spec.policy.empty() ? params : spec.policy + "." + AlgorithmCode(algorithm)) + mode;
  if (Status s = ValidatePolicy(p); !s.ok()) return s;
  // The local fallback decides without hot-key leases or blocks.
  Policy plain = p;
  plain.lease = 0;
  plain.lease_validity = 0;
  plain.block_for = 0;
  r.fallback = decide::FallbackPolicy(plain);
  return Status::Ok();
}

Status RuleSet::AddDescriptors(const std::string& domain, Node& node,
                               const std::vector<DescriptorSpec>& specs,
                               const std::string& parent) {
  for (const DescriptorSpec& d : specs) {
    auto child = std::make_unique<Node>();
    Node* c = child.get();
    const std::string part = d.has_value ? d.key + "_" + d.value : d.key;
    const std::string path = parent.empty() ? part : parent + "." + part;
    if (!d.has_value) {
      node.any.emplace(d.key, std::move(child));
    } else if (d.value.find('*') != std::string::npos) {
      node.wildcard.push_back(Node::Wildcard{d.key, d.value, std::move(child)});
      if (d.share_threshold) c->shared_pattern = d.value;
    } else {
      node.exact.emplace(d.key + '\0' + d.value, std::move(child));
    }
    const std::vector<const RateLimitSpec*> limits = LimitsOf(d);
    Rule* prev = nullptr;
    for (std::size_t j = 0; j < limits.size(); ++j) {
      auto rule = std::make_unique<Rule>();
      const RateLimitSpec& s = *limits[j];
      rule->domain = domain;
      // Several limits on one descriptor: each has its own series and /rlconfig line,
      // "path#1", "path#2", ... in list order.
      rule->multi = !d.rate_limits.empty();
      rule->index = j;
      rule->path = rule->multi ? path + "#" + std::to_string(j + 1) : path;
      rule->unlimited = s.unlimited;
      rule->detailed_metric = d.detailed_metric;
      rule->name = s.name;
      rule->replaces = s.replaces;
      rule->unit = s.unit;
      rule->requests_per_unit = s.requests_per_unit;
      rule->unit_multiplier = s.unit_multiplier;
      rule->quota_mode = d.quota_mode;
      rule->metadata = d.metadata;
      rule->counters = metrics_->Descriptor(domain, rule->path);
      if (Status st = FinishRule(*rule, s, d.shadow_mode); !st.ok()) {
        return Status::InvalidArgument(config_.file + ":" + std::to_string(s.line) + ": " +
                                       st.message());
      }
      // Limits of one descriptor share its store key and differ by policy name: two
      // with the same name would be one counter charged twice.
      for (const Rule* o = c->rule; o != nullptr; o = o->next) {
        if (o->policy.name == rule->policy.name) {
          return Status::InvalidArgument(
              config_.file + ":" + std::to_string(s.line) +
              ": rate_limits: this limit and the one on line " +
              std::to_string(limits[o->index]->line) +
              " would share one counter (same algorithm, rate, window, burst, failure mode and "
              "policy; with on_change, the same algorithm and policy): remove one or give them "
              "different parameters or policy names");
        }
      }
      if (prev == nullptr) {
        c->rule = rule.get();
      } else {
        prev->next = rule.get();
      }
      prev = rule.get();
      c->value_to_metric = d.value_to_metric;
      rules_.push_back(std::move(rule));
    }
    if (Status st = AddDescriptors(domain, *c, d.descriptors, path); !st.ok()) return st;
  }
  return Status::Ok();
}

Result<std::unique_ptr<RuleSet>> RuleSet::Compile(const Config& config, Metrics& metrics) {
  std::unique_ptr<RuleSet> s(new RuleSet());
  s->config_ = config;
  s->metrics_ = &metrics;
  for (const DomainSpec& d : config.domains) {
    Node& root = s->domains_[d.domain];
    if (Status st = s->AddDescriptors(d.domain, root, d.descriptors, ""); !st.ok()) return st;
    s->override_counters_[d.domain] = metrics.Descriptor(d.domain, "_override_");
  }
  return s;
}

const Node* RuleSet::Domain(std::string_view domain) const {
  auto it = domains_.find(domain);
  return it == domains_.end() ? nullptr : &it->second;
}

bool RuleSet::GlobMatch(std::string_view pattern, std::string_view value) {
  // Iterative glob with backtracking to the last '*': linear in practice, never
  // exponential.
  std::size_t p = 0, v = 0, star = std::string_view::npos, mark = 0;
  while (v < value.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = v;
    } else if (p < pattern.size() && pattern[p] == value[v]) {
      ++p;
      ++v;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      v = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const Rule* RuleSet::Match(const Node& root, std::span<const Entry> entries, const Node** path) {
  thread_local std::string probe;
  const Node* level = &root;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    probe.assign(e.key);
    probe.push_back('\0');
    probe.append(e.value);
    const Node* next = nullptr;
    if (auto it = level->exact.find(std::string_view(probe)); it != level->exact.end()) {
      next = it->second.get();
    }
    if (next == nullptr) {
      for (const Node::Wildcard& w : level->wildcard) {
        if (w.key == e.key && GlobMatch(w.pattern, e.value)) {
          next = w.node.get();
          break;
        }
      }
    }
    if (next == nullptr) {
      if (auto it = level->any.find(e.key); it != level->any.end()) next = it->second.get();
    }
    if (next == nullptr) return nullptr;
    if (path != nullptr) path[i] = next;
    if (i + 1 == entries.size()) return next->rule;
    if (!next->HasChildren()) return nullptr;
    level = next;
  }
  return nullptr;
}

std::string RuleSet::Dump() const {
  std::vector<std::string> lines;
  for (const auto& r : rules_) {
    std::string unit = UnitName(r->unit);
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string line = r->domain + "." + r->path + ": ";
    if (r->unlimited) {
      line += "unlimited=true";
    } else if (r->policy.algorithm == Algorithm::kConcurrency) {
      line += "concurrency=" + std::to_string(r->policy.limit) +
              " lease_ms=" + std::to_string(r->policy.window / 1000);
    } else {
      line += "unit=" + unit + " requests_per_unit=" + std::to_string(r->requests_per_unit);
      if (r->unit_multiplier != 1) line += " unit_multiplier=" + std::to_string(r->unit_multiplier);
    }
    line +=
        std::string(", shadow_mode: ") + (r->policy.shadow && !r->quota_mode ? "true" : "false");
    if (r->quota_mode) line += ", quota_mode: true";
    if (!r->name.empty()) line += ", name: " + r->name;
    for (const std::string& n : r->replaces) line += ", replaces: " + n;
    if (!r->unlimited) {
      line += std::string(", algorithm: ") + AlgorithmName(r->policy.algorithm) +
              ", capacity: " + std::to_string(r->policy.Capacity()) +
              ", failure_mode: " + FailureModeName(r->policy.failure_mode) +
              ", policy: " + r->policy.name;
    }
    lines.push_back(std::move(line));
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

Status RuleSet::OverrideRule(std::string_view domain, std::uint32_t requests_per_unit, int unit,
                             Rule& out) const {
  out.path = "_override_";
  out.unlimited = false;
  out.detailed_metric = false;
  out.name.clear();
  out.replaces.clear();
  out.unit = static_cast<Unit>(unit);
  out.requests_per_unit = requests_per_unit;
  out.unit_multiplier = 1;
  out.quota_mode = false;
  auto it = override_counters_.find(domain);
  out.counters = it == override_counters_.end() ? nullptr : it->second;
  const Settings& s = config_.settings;
  RateLimitSpec spec;
  spec.unit = out.unit;
  spec.requests_per_unit = requests_per_unit;
  spec.algorithm = s.default_algorithm;
  spec.failure_mode = s.default_failure_mode;
  return FinishRule(out, spec, false);
}

}  // namespace sluice::service
