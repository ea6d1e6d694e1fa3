// The config side of sluiced's engine (as envoyproxy/ratelimit separates config from
// service): a Config compiled into one descriptor tree per domain whose nodes carry the
// rules (a rule: a limit with its sluice Policy), and the walk that matches a request
// descriptor to its rule. Immutable once compiled; shared by every request of a
// config generation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "service/config.h"
#include "service/metrics.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice::service {

// One key/value pair of a descriptor. Views: the caller keeps the bytes alive.
struct Entry {
  std::string_view key;
  std::string_view value;
};

// A configured limit (a descriptor with a rate_limit block), or a caller override.
struct Rule {
  std::string path;  // metric label, e.g. "remote_address" or "path_/login.remote_address"
  bool unlimited = false;
  bool detailed_metric = false;
  std::string name;  // rate_limit.name
  std::vector<std::string> replaces;
  Unit unit = Unit::kUnknown;
  std::uint32_t requests_per_unit = 0;
  // The sluice policy; its name carries every parameter that shapes the stored state.
  Policy policy;
  // What the local fallback enforces when the store fails (decide::FallbackPolicy).
  Policy fallback;
  DescriptorCounters* counters = nullptr;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// One level of a descriptor tree.
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

// A compiled configuration.
class RuleSet {
 public:
  // Compiles `config`; descriptor counters come from `metrics` (which must outlive the
  // RuleSet). Errors name FILE:LINE.
  static Result<std::unique_ptr<RuleSet>> Compile(const Config& config, Metrics& metrics);

  // The tree of `domain`, or null when the domain has no configuration.
  const Node* Domain(std::string_view domain) const;

  // envoyproxy/ratelimit's walk: at each level the entry matches "key_value" exactly,
  // else a "value*" prefix, else a key-only descriptor; the limit applies when the last
  // entry lands on a descriptor with a rate_limit. Null: no limit applies.
  static const Rule* Match(const Node& root, std::span<const Entry> entries);

  // Fills `out` with the rule for a caller's override (requests_per_unit per `unit`,
  // Envoy's RateLimitUnit number) in `domain`, built from the settings' defaults. No
  // state is kept per override: equal overrides name equal policies and share counters
  // in the store.
  Status OverrideRule(std::string_view domain, std::uint32_t requests_per_unit, int unit,
                      Rule& out) const;

  const Config& config() const { return config_; }
  std::size_t rule_count() const { return rules_.size(); }
  std::size_t domain_count() const { return domains_.size(); }

 private:
  RuleSet() = default;
  Status FinishRule(Rule& r, const std::string& policy_name, Algorithm algorithm,
                    std::uint64_t burst, FailureMode failure, std::uint32_t divisor,
                    bool shadow) const;
  Status AddDescriptors(const std::string& domain, Node& node,
                        const std::vector<DescriptorSpec>& specs, const std::string& parent);

  Config config_;
  Metrics* metrics_ = nullptr;
  StringMap<Node> domains_;
  // The counters of caller overrides, one series per domain.
  StringMap<DescriptorCounters*> override_counters_;
  std::vector<std::unique_ptr<Rule>> rules_;
};

}  // namespace sluice::service
