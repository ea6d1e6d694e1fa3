// Compiling a Config into descriptor trees and matching request descriptors to rules.
#include "service/rules.h"

#include "limiter/decider.h"

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
    default:
      return "gcra";
  }
}

}  // namespace

Status RuleSet::FinishRule(Rule& r, const std::string& policy_name, Algorithm algorithm,
                           std::uint64_t burst, FailureMode failure, std::uint32_t divisor,
                           bool shadow) const {
  if (r.unlimited) return Status::Ok();
  Policy& p = r.policy;
  p.algorithm = algorithm;
  p.limit = r.requests_per_unit;
  p.window = UnitMicros(r.unit);
  p.burst = burst;
  p.failure_mode = failure;
  p.fallback_divisor = divisor;
  p.shadow = shadow || config_.settings.shadow_mode;
  // The name carries every parameter that shapes the stored state, so a changed limit
  // starts afresh while an unchanged one keeps its counters across reloads.
  const std::string params = std::string(AlgorithmCode(algorithm)) + "." + std::to_string(p.limit) +
                             "." + std::to_string(p.window / 1000) + "." + std::to_string(burst);
  // Two limits with equal parameters but different failure modes can meet in one
  // request: the mode joins the name unless it is the default, so their store keys
  // differ.
  std::string mode;
  if (failure == FailureMode::kFailClosed) mode = ".fc";
  if (failure == FailureMode::kLocalFallback) mode = ".lf" + std::to_string(divisor);
  p.name = (policy_name.empty() ? params : policy_name + "." + AlgorithmCode(algorithm)) + mode;
  if (Status s = ValidatePolicy(p); !s.ok()) return s;
  r.fallback = decide::FallbackPolicy(p);
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
      rule->counters = metrics_->Descriptor(domain, rule->path);
      if (Status st = FinishRule(*rule, s.policy, s.algorithm, s.burst, s.failure_mode,
                                 s.fallback_divisor, d.shadow_mode);
          !st.ok()) {
        return Status::InvalidArgument(config_.file + ":" + std::to_string(s.line) + ": " +
                                       st.message());
      }
      c->rule = rule.get();
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

const Rule* RuleSet::Match(const Node& root, std::span<const Entry> entries) {
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
    if (i + 1 == entries.size()) return next->rule;
    if (!next->HasChildren()) return nullptr;
    level = next;
  }
  return nullptr;
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
  auto it = override_counters_.find(domain);
  out.counters = it == override_counters_.end() ? nullptr : it->second;
  const Settings& s = config_.settings;
  return FinishRule(out, "", s.default_algorithm, 0, s.default_failure_mode, 1, false);
}

}  // namespace sluice::service
