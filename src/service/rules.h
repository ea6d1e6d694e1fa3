// The config side of sluiced's engine (as envoyproxy/ratelimit separates config from
// service): a Config compiled into one descriptor tree per domain whose nodes carry the
// rules (a rule: a limit with its sluice Policy), and the walk that matches a request
// descriptor to its rule. Immutable once compiled; shared by every request of a
// config generation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  std::string domain;
  std::string path;  // metric label, e.g. "remote_address" or "path_/login.remote_address"
  bool unlimited = false;
  bool detailed_metric = false;
  std::string name;  // rate_limit.name
  std::vector<std::string> replaces;
  Unit unit = Unit::kUnknown;
  std::uint32_t requests_per_unit = 0;
  std::uint32_t unit_multiplier = 1;
  // requests_per_unit 0 (envoyproxy/ratelimit's ban): every request is OVER_LIMIT (or,
  // in shadow or quota mode, reported so) without a store call; policy.window is the
  // reported reset.
  bool banned = false;
  // The descriptor's `metadata` as JSON object text (DescriptorSpec::metadata).
  std::string metadata;
  // quota_mode: over the limit is counted and reported, but answered OK (the policy is
  // decided apart from the enforced ones, like shadow mode).
  bool quota_mode = false;
  // The sluice policy; its name carries every parameter that shapes the stored state.
  Policy policy;
  // What the local fallback enforces when the store fails (decide::FallbackPolicy).
  Policy fallback;
  DescriptorCounters* counters = nullptr;
  // `rate_limits`: the next limit on the same descriptor (null: this is the last or the
  // only one). Every limit of the chain applies to a request that lands on it.
  const Rule* next = nullptr;
  // The position in its descriptor's `rate_limits` list (0 for a lone `rate_limit`) and
  // whether the descriptor has several limits.
  std::size_t index = 0;
  bool multi = false;
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
  // A value with '*' in it: each '*' matches any run of bytes (also none).
  struct Wildcard {
    std::string key;
    std::string pattern;
    std::unique_ptr<Node> node;
  };
  std::vector<Wildcard> wildcard;
  // The descriptor's first limit (the others follow Rule::next).
  Rule* rule = nullptr;
  // share_threshold: every value matching this node's pattern shares one counter,
  // keyed by the pattern (empty: one counter per value).
  std::string shared_pattern;
  // value_to_metric: the request's value at this level joins the metric label.
  bool value_to_metric = false;
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
  // else a value pattern with '*' (in configuration order), else a key-only
  // descriptor; the limit applies when the last entry lands on a descriptor with a
  // rate_limit (or rate_limits: the first, the others follow Rule::next). Null: no
  // limit applies. `path`, when given (entries.size() slots),
  // receives the node each entry landed on.
  static const Rule* Match(const Node& root, std::span<const Entry> entries,
                           const Node** path = nullptr);

  // True when `value` matches `pattern`, where each '*' matches any run of bytes.
  static bool GlobMatch(std::string_view pattern, std::string_view value);

  // Fills `out` with the rule for a caller's override (requests_per_unit per `unit`,
  // Envoy's RateLimitUnit number) in `domain`, built from the settings' defaults. No
  // state is kept per override: equal overrides name equal policies and share counters
  // in the store.
  Status OverrideRule(std::string_view domain, std::uint32_t requests_per_unit, int unit,
                      Rule& out) const;

  // The loaded rules, one line each in envoyproxy/ratelimit's /rlconfig form
  // ("DOMAIN.PATH: unit=MINUTE requests_per_unit=10, shadow_mode: false") followed by
  // sluice's own fields, sorted.
  std::string Dump() const;

  const Config& config() const { return config_; }
  std::size_t rule_count() const { return rules_.size(); }
  std::size_t domain_count() const { return domains_.size(); }

 private:
  RuleSet() = default;
  // Fills r.policy (PolicyOf(spec), named and with its shadow flag) and r.fallback.
  Status FinishRule(Rule& r, const RateLimitSpec& spec, bool shadow) const;
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
