// sluiced's YAML loader: the `rate_limit` and `rate_limits` blocks of a descriptor.
#include <cctype>
#include <limits>
#include <string>

#include "service/config_yaml.h"

namespace sluice::service::config_internal {
namespace {

class RateLimitParser : public YamlReader {
 public:
  explicit RateLimitParser(const YamlReader& y) : YamlReader(y.file()) {}

  RateLimitSpec ParseRateLimit(const YAML::Node& n, const Settings& s) {
    CheckKeys(n, "rate_limit",
              {"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces",
               "algorithm", "burst", "failure_mode", "fallback_divisor", "policy", "lease",
               "lease_validity", "block_for", "on_change", "concurrency", "overage", "max_debt"});
    RateLimitSpec r;
    r.line = Line(n);
    r.algorithm = s.default_algorithm;
    r.failure_mode = s.default_failure_mode;
    if (n["unlimited"]) r.unlimited = Bool(n["unlimited"], "unlimited");
    ParseRate(n, r);
    if (n["name"]) r.name = Str(n["name"], "name");
    if (const YAML::Node rep = n["replaces"]) ParseReplaces(rep, r);
    ParseSluiceFields(n, r);
    if (n["concurrency"]) return ParseConcurrency(n, std::move(r));
    return FinishRate(n, std::move(r));
  }

  // unit, unit_multiplier, requests_per_unit.
  void ParseRate(const YAML::Node& n, RateLimitSpec& r) {
    if (const YAML::Node u = n["unit"]) {
      const std::string unit = Str(u, "unit");
      std::string lower;
      for (char c : unit) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (int i = 1; i <= 7; ++i) {
        if (lower == UnitName(static_cast<Unit>(i))) r.unit = static_cast<Unit>(i);
      }
      if (r.unit == Unit::kUnknown) {
        Fail(u, "unit must be second, minute, hour, day, week, month or year (got '" + unit + "')");
      }
    }
    if (const YAML::Node m = n["unit_multiplier"]) {
      r.unit_multiplier = static_cast<std::uint32_t>(Uint(m, "unit_multiplier", 1'000'000));
      if (r.unit_multiplier == 0) Fail(m, "unit_multiplier must be at least 1");
    }
    if (const YAML::Node q = n["requests_per_unit"]) {
      r.requests_per_unit = static_cast<std::uint32_t>(
          Uint(q, "requests_per_unit", std::numeric_limits<std::uint32_t>::max()));
    }
  }

  // `replaces: [{name: ...}, ...]`.
  void ParseReplaces(const YAML::Node& rep, RateLimitSpec& r) {
    if (!rep.IsSequence()) Fail(rep, "replaces must be a list of {name: ...}");
    for (const auto& item : rep) {
      CheckKeys(item, "replaces item", {"name"});
      if (!item["name"]) Fail(item, "replaces item needs a name");
      const std::string name = Str(item["name"], "name");
      if (name.empty()) Fail(item, "replaces item needs a non-empty name");
      r.replaces.push_back(name);
    }
    // envoyproxy/ratelimit: a rule without a name may replace others (its README's
    // own example), but a rule may not replace itself.
    for (const std::string& name : r.replaces) {
      if (name == r.name) Fail(rep, "rate_limit '" + name + "' replaces itself");
    }
  }

  // The fields sluice adds to envoyproxy/ratelimit's: algorithm, burst, failure modes,
  // leases, blocks, on_change and a shared policy name.
  void ParseSluiceFields(const YAML::Node& n, RateLimitSpec& r) {
    if (const YAML::Node a = n["algorithm"]) {
      auto alg = ParseAlgorithm(Str(a, "algorithm"));
      if (!alg.ok()) Fail(a, alg.status().message());
      r.algorithm = *alg;
    }
    if (n["burst"]) r.burst = Uint(n["burst"], "burst", 1'000'000'000'000ULL);
    if (const YAML::Node f = n["failure_mode"]) {
      auto m = ParseFailureMode(Str(f, "failure_mode"));
      if (!m.ok()) Fail(f, m.status().message());
      r.failure_mode = *m;
    }
    if (n["fallback_divisor"]) {
      r.fallback_divisor =
          static_cast<std::uint32_t>(Uint(n["fallback_divisor"], "fallback_divisor", 1'000'000));
      if (r.fallback_divisor == 0)
        Fail(n["fallback_divisor"], "fallback_divisor must be at least 1");
    }
    const bool concurrency = static_cast<bool>(n["concurrency"]);
    if (n["lease"] && !concurrency) {
      const YAML::Node l = n["lease"];
      if (l.IsScalar() && !l.Scalar().empty() &&
          !std::isdigit(static_cast<unsigned char>(l.Scalar().back()))) {
        Fail(l, "lease must be a number of units (a hot-key lease); a duration ('" + l.Scalar() +
                    "') is a permit's lifetime and needs concurrency: N");
      }
      r.lease = Uint(l, "lease", 1'000'000'000'000ULL);
    }
    if (const YAML::Node v = n["lease_validity"]) {
      auto us = ParseDuration(Str(v, "lease_validity"));
      if (!us.ok()) Fail(v, "lease_validity: " + us.status().message());
      if (*us <= 0) Fail(v, "lease_validity must be more than 0");
      if (r.lease == 0) Fail(v, "lease_validity needs a lease");
      r.lease_validity = *us;
    }
    // Blocks: `block_for: 10m` (Policy::block_for).
    if (const YAML::Node v = n["block_for"]) {
      auto us = ParseDuration(Str(v, "block_for"));
      if (!us.ok()) Fail(v, "block_for: " + us.status().message());
      if (*us > 366LL * 24 * 3600 * 1'000'000) Fail(v, "block_for must be at most 366 days");
      r.block_for = *us;
    }
    if (const YAML::Node oc = n["on_change"]) {
      auto m = ParseOnChange(Str(oc, "on_change"));
      if (!m.ok()) Fail(oc, m.status().message());
      r.on_change = *m;
    }
    // Usage charged after the fact (issue #21): `overage: charge` takes a cost that does
    // not fit anyway, as debt up to `max_debt` (ValidatePolicy checks the pair).
    if (const YAML::Node o = n["overage"]) {
      auto m = ParseOverage(Str(o, "overage"));
      if (!m.ok()) Fail(o, m.status().message());
      r.overage = *m;
    }
    if (const YAML::Node d = n["max_debt"]) {
      r.max_debt = Uint(d, "max_debt", std::numeric_limits<std::uint64_t>::max());
      if (r.overage != Overage::kCharge) {
        Fail(d, "max_debt applies only with overage: charge (the debt a key may carry)");
      }
    }
    if (const YAML::Node p = n["policy"]) {
      r.policy = Str(p, "policy");
      Policy probe;
      probe.name = r.policy;
      probe.limit = 1;
      probe.window = 1'000'000;
      if (r.policy.size() > 48) Fail(p, "policy name must be at most 48 characters");
      if (Status st = ValidatePolicy(probe); !st.ok()) Fail(p, st.message());
    }
  }

  // The checks of a rate (not concurrency) limit once its fields are read.
  RateLimitSpec FinishRate(const YAML::Node& n, RateLimitSpec r) {
    if (r.unlimited) {
      if (n["unit"] || n["requests_per_unit"] || n["unit_multiplier"]) {
        Fail(n, "an unlimited rate_limit must not set unit, requests_per_unit or unit_multiplier");
      }
      return r;
    }
    if (r.unit == Unit::kUnknown) {
      Fail(n, "rate_limit needs a unit (second, minute, hour, day, week, month or year)");
    }
    if (!n["requests_per_unit"]) Fail(n, "rate_limit needs requests_per_unit");
    if (r.requests_per_unit == 0) {
      // envoyproxy/ratelimit's ban (its README, "Black list IP"): every request is
      // OVER_LIMIT, without a counter. The sluice fields that shape a counter do not apply.
      for (const char* f :
           {"burst", "lease", "lease_validity", "block_for", "on_change", "overage", "max_debt"}) {
        if (n[f]) {
          Fail(n[f],
               std::string("requests_per_unit: 0 denies every request; ") + f + " does not apply");
        }
      }
      return r;
    }
    if (r.burst != 0 && r.algorithm != Algorithm::kTokenBucket && r.algorithm != Algorithm::kGcra) {
      Fail(n["burst"], "burst applies only to token_bucket and gcra");
    }
    // Validate the policy the rule will become, so a bad combination fails at load time.
    Policy p = PolicyOf(r);
    p.name = "probe";
    FailIfInvalid(n, p);
    return r;
  }

  // Validates the policy a `rate_limit` block `n` makes (named "probe"), failing at its
  // line with ValidatePolicy's reason.
  void FailIfInvalid(const YAML::Node& n, const Policy& p) {
    if (Status st = ValidatePolicy(p); !st.ok()) {
      std::string m = st.message();
      const std::string prefix = "policy 'probe': ";
      if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
      Fail(n, "rate_limit: " + m);
    }
  }

  // --- concurrency limits (issue #12) ---
  // The rest of a `rate_limit` block with `concurrency: N`: N permits held at once,
  // each living `lease` (a duration) unless released. The rate fields make no sense
  // there and are refused, so a typo cannot turn a concurrency limit into a rate limit.
  RateLimitSpec ParseConcurrency(const YAML::Node& n, RateLimitSpec r) {
    const YAML::Node c = n["concurrency"];
    for (const char* f :
         {"unit", "requests_per_unit", "unit_multiplier", "unlimited", "algorithm", "burst",
          "lease_validity", "block_for", "on_change", "overage", "max_debt"}) {
      if (n[f]) {
        Fail(n[f], std::string(f) +
                       " does not apply to a concurrency limit (concurrency: N permits held at "
                       "once, each for at most lease)");
      }
    }
    r.concurrency = Uint(c, "concurrency", std::numeric_limits<std::uint32_t>::max());
    if (r.concurrency == 0) Fail(c, "concurrency must be at least 1 (permits held at once)");
    const YAML::Node l = n["lease"];
    if (!l) {
      Fail(n,
           "a concurrency limit needs lease: how long a permit lives unless released or "
           "extended (e.g. lease: 30s)");
    }
    auto us = ParseDuration(Str(l, "lease"));
    if (!us.ok()) Fail(l, "lease: " + us.status().message() + " (a duration such as 30s)");
    if (*us <= 0) Fail(l, "lease must be more than 0 (got '" + l.Scalar() + "')");
    r.permit_lease = *us;
    r.algorithm = Algorithm::kConcurrency;
    r.requests_per_unit = static_cast<std::uint32_t>(r.concurrency);
    Policy p = PolicyOf(r);
    p.name = "probe";
    FailIfInvalid(n, p);
    return r;
  }

  // `rate_limits: [{...}, {...}]`: several limits on one descriptor (a sluice field:
  // envoyproxy/ratelimit has one `rate_limit` per descriptor, so no config of its
  // changes meaning).
  void ParseRateLimits(const YAML::Node& list, const Settings& s, DescriptorSpec& d) {
    if (d.has_rate_limit) {
      Fail(list, "a descriptor has either rate_limit or rate_limits, not both");
    }
    if (!list.IsSequence() || list.size() == 0) {
      Fail(list, "rate_limits must be a non-empty list of rate_limit blocks");
    }
    if (list.size() > kMaxLimitsPerDescriptor) {
      Fail(list, "rate_limits has " + std::to_string(list.size()) + " limits (at most " +
                     std::to_string(kMaxLimitsPerDescriptor) + ")");
    }
    for (const auto& item : list) {
      RateLimitSpec r = ParseRateLimit(item, s);
      if (r.unlimited) {
        Fail(item, "rate_limits items must be limits (unlimited: true makes the others moot)");
      }
      for (const RateLimitSpec& o : d.rate_limits) {
        if (!r.name.empty() && r.name == o.name) {
          Fail(item, "rate_limits: name '" + r.name + "' is used twice (first on line " +
                         std::to_string(o.line) + ")");
        }
      }
      d.rate_limits.push_back(std::move(r));
    }
  }
};

}  // namespace

RateLimitSpec ParseRateLimit(const YamlReader& y, const YAML::Node& n, const Settings& s) {
  return RateLimitParser(y).ParseRateLimit(n, s);
}

void ParseRateLimits(const YamlReader& y, const YAML::Node& list, const Settings& s,
                     DescriptorSpec& d) {
  RateLimitParser(y).ParseRateLimits(list, s, d);
}

}  // namespace sluice::service::config_internal
