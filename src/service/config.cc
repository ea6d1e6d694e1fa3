// YAML loading and validation for sluiced. Every error names FILE:LINE.
#include "service/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/utf8.h"

namespace sluice::service {
namespace {

// Thrown inside the loader only (never on the decision path) and turned into a Status.
struct ConfigError {
  std::string message;
};

class Loader {
 public:
  explicit Loader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void Fail(const YAML::Node& n, const std::string& what) const {
    const int line = n.IsDefined() ? n.Mark().line + 1 : 0;
    throw ConfigError{Where(line) + what};
  }
  [[noreturn]] void FailAt(int line, const std::string& what) const {
    throw ConfigError{Where(line) + what};
  }
  std::string Where(int line) const {
    return line > 0 ? file_ + ":" + std::to_string(line) + ": " : file_ + ": ";
  }
  static int Line(const YAML::Node& n) { return n.Mark().line + 1; }

  // Rejects keys of map `n` not in `allowed`, naming the allowed ones.
  void CheckKeys(const YAML::Node& n, const char* what,
                 std::initializer_list<const char*> allowed) {
    if (!n.IsMap()) Fail(n, std::string(what) + " must be a mapping");
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        Fail(kv.first, "unknown field '" + k + "' in " + what + " (allowed: " + list + ")");
      }
    }
  }

  std::string Str(const YAML::Node& n, const char* field) {
    if (!n.IsScalar()) Fail(n, std::string(field) + " must be a string");
    return n.Scalar();
  }
  bool Bool(const YAML::Node& n, const char* field) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE" || s == "yes") return true;
      if (s == "false" || s == "False" || s == "FALSE" || s == "no") return false;
    }
    Fail(n, std::string(field) + " must be true or false");
  }
  std::uint64_t Uint(const YAML::Node& n, const char* field, std::uint64_t max) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      std::uint64_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) {
        if (v > max) {
          Fail(n,
               std::string(field) + " must be at most " + std::to_string(max) + " (got " + s + ")");
        }
        return v;
      }
    }
    Fail(n, std::string(field) + " must be a non-negative integer (got '" +
                (n.IsScalar() ? n.Scalar() : std::string("a non-scalar")) + "')");
  }

  Settings ParseSettings(const YAML::Node& n) {
    // Packed by hand: clang-format would give each key a line of its own.
    // clang-format off
    CheckKeys(n, "sluiced settings",
              {"http", "grpc", "redis", "max_body_bytes", "max_descriptors", "max_entries",
               "default_algorithm", "default_failure_mode", "shadow_mode", "response_headers",
               "near_limit_ratio", "reload_poll", "http_threads", "http_io_threads", "max_keys",
               "nginx_headers", "log_level", "admin", "admin_token_file", "public_rlconfig"});
    // clang-format on
    Settings s;
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (k == "http" || k == "grpc" || k == "admin") {
        std::string addr = Str(v, k.c_str());
        if (Status st = ValidateListenAddress(addr); !st.ok()) Fail(v, k + ": " + st.message());
        (k == "http" ? s.http : k == "grpc" ? s.grpc : s.admin) = addr;
      } else if (k == "admin_token_file") {
        s.admin_token_file = Str(v, "admin_token_file");
      } else if (k == "public_rlconfig") {
        s.public_rlconfig = Bool(v, "public_rlconfig");
      } else if (k == "redis") {
        s.redis = Str(v, "redis");
      } else if (k == "max_body_bytes") {
        s.max_body_bytes = Uint(v, "max_body_bytes", 64u << 20);
        if (s.max_body_bytes < 64) Fail(v, "max_body_bytes must be at least 64");
      } else if (k == "max_descriptors") {
        s.max_descriptors = Uint(v, "max_descriptors", 16);
        if (s.max_descriptors == 0) Fail(v, "max_descriptors must be 1-16");
      } else if (k == "max_entries") {
        s.max_entries = Uint(v, "max_entries", 64);
        if (s.max_entries == 0) Fail(v, "max_entries must be 1-64");
      } else if (k == "default_algorithm") {
        auto a = ParseAlgorithm(Str(v, "default_algorithm"));
        if (!a.ok()) Fail(v, a.status().message());
        s.default_algorithm = *a;
      } else if (k == "default_failure_mode") {
        auto m = ParseFailureMode(Str(v, "default_failure_mode"));
        if (!m.ok()) Fail(v, m.status().message());
        s.default_failure_mode = *m;
      } else if (k == "shadow_mode") {
        s.shadow_mode = Bool(v, "shadow_mode");
      } else if (k == "response_headers") {
        const std::string h = v.IsScalar() ? v.Scalar() : std::string();
        if (h == "x_ratelimit") {
          s.response_headers = Settings::Headers::kXRateLimit;
        } else if (h == "ratelimit") {
          s.response_headers = Settings::Headers::kRateLimit;
        } else if (h == "draft10") {
          s.response_headers = Settings::Headers::kDraft10;
        } else if (h == "none") {
          s.response_headers = Settings::Headers::kNone;
        } else if (h == "true" || h == "false" || h == "yes" || h == "no") {
          s.response_headers = Bool(v, "response_headers") ? Settings::Headers::kXRateLimit
                                                           : Settings::Headers::kNone;
        } else {
          Fail(v,
               "response_headers must be x_ratelimit, ratelimit, draft10, none, true or false "
               "(got '" +
                   h + "')");
        }
      } else if (k == "near_limit_ratio") {
        double r = -1;
        try {
          r = v.as<double>();
        } catch (const YAML::Exception&) {
        }
        if (!(r > 0 && r <= 1)) Fail(v, "near_limit_ratio must be a number in (0, 1]");
        s.near_limit_ratio = r;
      } else if (k == "reload_poll") {
        const std::string d = Str(v, "reload_poll");
        if (d == "0" || d == "off") {
          s.reload_poll = 0;
        } else {
          auto us = ParseDuration(d);
          if (!us.ok()) Fail(v, "reload_poll: " + us.status().message());
          if (*us < 10'000) Fail(v, "reload_poll must be at least 10ms (or 0 to disable)");
          s.reload_poll = *us;
        }
      } else if (k == "http_threads") {
        // It sized cpp-httplib's thread-per-connection pool; the event-driven front end
        // has no such pool, and reading it as I/O threads would turn the old default
        // of 64 into 64 busy threads. Refused rather than silently ignored.
        Fail(kv.first,
             "http_threads is no longer supported: the HTTP front end is event-driven and "
             "holds no thread per connection; remove it (http_io_threads or "
             "--http-io-threads sets the I/O threads, one per core by default)");
      } else if (k == "http_io_threads") {
        s.http_io_threads = Uint(v, "http_io_threads", 256);
      } else if (k == "max_keys") {
        s.max_keys = Uint(v, "max_keys", std::uint64_t{1} << 32);
        if (s.max_keys == 0) Fail(v, "max_keys must be at least 1");
      } else if (k == "nginx_headers") {
        if (!v.IsMap()) Fail(v, "nginx_headers must map header names to descriptor keys");
        s.nginx_headers.clear();
        for (const auto& h : v) {
          const std::string header = Str(h.first, "nginx_headers key");
          const std::string key = Str(h.second, "nginx_headers value");
          if (header.empty() || key.empty())
            Fail(h.first, "nginx_headers entries must be non-empty");
          s.nginx_headers[header] = key;
        }
      } else if (k == "log_level") {
        s.log_level = Str(v, "log_level");
        if (s.log_level != "debug" && s.log_level != "info" && s.log_level != "warn" &&
            s.log_level != "error") {
          Fail(v, "log_level must be debug, info, warn or error (got '" + s.log_level + "')");
        }
      }
    }
    return s;
  }

  RateLimitSpec ParseRateLimit(const YAML::Node& n, const Settings& s) {
    CheckKeys(n, "rate_limit",
              {"unit", "requests_per_unit", "unit_multiplier", "unlimited", "name", "replaces",
               "algorithm", "burst", "failure_mode", "fallback_divisor", "policy", "lease",
               "lease_validity", "block_for", "on_change", "concurrency"});
    RateLimitSpec r;
    r.line = Line(n);
    r.algorithm = s.default_algorithm;
    r.failure_mode = s.default_failure_mode;
    if (n["unlimited"]) r.unlimited = Bool(n["unlimited"], "unlimited");
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
    if (n["name"]) r.name = Str(n["name"], "name");
    if (const YAML::Node rep = n["replaces"]) {
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
    if (const YAML::Node p = n["policy"]) {
      r.policy = Str(p, "policy");
      Policy probe;
      probe.name = r.policy;
      probe.limit = 1;
      probe.window = 1'000'000;
      if (r.policy.size() > 48) Fail(p, "policy name must be at most 48 characters");
      if (Status st = ValidatePolicy(probe); !st.ok()) Fail(p, st.message());
    }
    if (concurrency) return ParseConcurrency(n, std::move(r));
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
      for (const char* f : {"burst", "lease", "lease_validity", "block_for", "on_change"}) {
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
    for (const char* f : {"unit", "requests_per_unit", "unit_multiplier", "unlimited", "algorithm",
                          "burst", "lease_validity", "block_for", "on_change"}) {
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

  // A descriptor's `metadata` as JSON, typed as YAML reads it: unquoted true/false are
  // booleans, unquoted numbers numbers, ~/null null, anything else a string.
  static nlohmann::json MetadataJson(const YAML::Node& n) {
    if (n.IsMap()) {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = MetadataJson(kv.second);
      return o;
    }
    if (n.IsSequence()) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) a.push_back(MetadataJson(e));
      return a;
    }
    if (!n.IsScalar()) return nullptr;
    const std::string& v = n.Scalar();
    if (n.Tag() == "!") return v;  // quoted: a string whatever it looks like
    if (v == "true") return true;
    if (v == "false") return false;
    if (v == "~" || v == "null") return nullptr;
    double x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc() && end == v.data() + v.size() && !v.empty()) return x;
    return v;
  }

  DescriptorSpec ParseDescriptor(const YAML::Node& n, const Settings& s, int depth) {
    // A level deeper than a request may have entries could never match.
    if (static_cast<std::size_t>(depth) >= s.max_entries) {
      Fail(n, "descriptors are nested more than max_entries (" + std::to_string(s.max_entries) +
                  ") levels deep: no request could reach this one");
    }
    CheckKeys(n, "descriptor",
              {"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
               "detailed_metric", "quota_mode", "share_threshold", "value_to_metric", "metadata"});
    DescriptorSpec d;
    d.line = Line(n);
    if (!n["key"]) Fail(n, "descriptor needs a key");
    d.key = Str(n["key"], "key");
    if (d.key.empty()) Fail(n["key"], "descriptor key must not be empty");
    if (const YAML::Node v = n["value"]) {
      d.value = Str(v, "value");
      d.has_value = true;
    }
    if (const YAML::Node r = n["rate_limit"]) {
      d.rate_limit = ParseRateLimit(r, s);
      d.has_rate_limit = true;
    }
    if (const YAML::Node list = n["rate_limits"]) ParseRateLimits(list, s, d);
    if (n["shadow_mode"]) d.shadow_mode = Bool(n["shadow_mode"], "shadow_mode");
    if (n["detailed_metric"]) d.detailed_metric = Bool(n["detailed_metric"], "detailed_metric");
    if (n["quota_mode"]) d.quota_mode = Bool(n["quota_mode"], "quota_mode");
    if (n["value_to_metric"]) d.value_to_metric = Bool(n["value_to_metric"], "value_to_metric");
    if (n["share_threshold"]) {
      d.share_threshold = Bool(n["share_threshold"], "share_threshold");
      if (d.share_threshold && d.value.find('*') == std::string::npos) {
        Fail(n["share_threshold"], "share_threshold applies only to a value with '*'");
      }
    }
    if (const YAML::Node md = n["metadata"]) {
      if (!md.IsMap()) {
        Fail(md, "metadata must be a mapping (it becomes the response's dynamic metadata)");
      }
      d.metadata = MetadataJson(md).dump();
    }
    if (const YAML::Node c = n["descriptors"]) d.descriptors = ParseDescriptors(c, s, depth + 1);
    return d;
  }

  std::vector<DescriptorSpec> ParseDescriptors(const YAML::Node& n, const Settings& s, int depth) {
    if (n.IsNull()) return {};
    if (!n.IsSequence()) Fail(n, "descriptors must be a list");
    std::vector<DescriptorSpec> out;
    std::map<std::string, int> seen;
    for (const auto& item : n) {
      DescriptorSpec d = ParseDescriptor(item, s, depth);
      const std::string id = d.has_value ? d.key + "_" + d.value : d.key;
      auto [it, fresh] = seen.emplace(id, d.line);
      if (!fresh) {
        FailAt(d.line, "duplicate descriptor '" + id + "' (first defined on line " +
                           std::to_string(it->second) + ")");
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  DomainSpec ParseDomain(const YAML::Node& n, const Settings& s) {
    CheckKeys(n, "domain", {"domain", "descriptors"});
    DomainSpec d;
    d.line = Line(n);
    if (!n["domain"]) Fail(n, "a domain block needs 'domain'");
    d.domain = Str(n["domain"], "domain");
    if (d.domain.empty()) Fail(n["domain"], "domain must not be empty");
    if (n["descriptors"]) d.descriptors = ParseDescriptors(n["descriptors"], s, 0);
    return d;
  }

  // yaml-cpp keeps every pair of a mapping, and lookups find the first: a key given
  // twice would silently ignore the second value. Rejects that in every mapping.
  void CheckDuplicateKeys(const YAML::Node& n) {
    if (n.IsMap()) {
      std::map<std::string, int> seen;
      for (const auto& kv : n) {
        if (kv.first.IsScalar()) {
          auto [it, fresh] = seen.emplace(kv.first.Scalar(), Line(kv.first));
          if (!fresh) {
            Fail(kv.first, "duplicate key '" + kv.first.Scalar() + "' (first on line " +
                               std::to_string(it->second) + ")");
          }
        }
        CheckDuplicateKeys(kv.second);
      }
    } else if (n.IsSequence()) {
      for (const auto& item : n) CheckDuplicateKeys(item);
    }
  }

  Config Parse(const std::string& text) {
    std::vector<YAML::Node> docs;
    try {
      // Not YAML::LoadAll: yaml-cpp 0.7's LoadAll loops forever on some inputs (a lone
      // "," found by the config fuzzer) where Load does not. Documents are split at
      // their "---" lines here and loaded one by one, each padded with the newlines
      // before it so that error lines stay the file's.
      std::size_t begin = 0, pad = 0, line_no = 0, pos = 0;
      std::string part;
      auto flush = [&](std::size_t end) {
        part.assign(pad, '\n');
        part.append(text, begin, end - begin);
        docs.push_back(YAML::Load(part));
      };
      while (pos <= text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string_view l(text.data() + pos, eol - pos);
        if (pos > begin && (l == "---" || l.starts_with("--- ") || l == "---\r")) {
          flush(pos);
          begin = pos;
          pad = line_no;
        }
        pos = eol + 1;
        ++line_no;
      }
      flush(text.size());
    } catch (const YAML::ParserException& e) {
      FailAt(e.mark.line + 1, "invalid YAML: " + e.msg);
    }
    for (const YAML::Node& doc : docs) CheckDuplicateKeys(doc);
    Config c;
    c.file = file_;
    // Settings first: they hold the defaults for every rate_limit, wherever they appear.
    bool have_settings = false;
    for (const YAML::Node& doc : docs) {
      if (doc.IsNull()) continue;
      if (!doc.IsMap()) Fail(doc, "a config document must be a mapping");
      CheckKeys(doc, "config document", {"sluiced", "domain", "descriptors", "domains"});
      if (const YAML::Node s = doc["sluiced"]) {
        if (have_settings) Fail(s, "'sluiced' settings appear twice");
        c.settings = ParseSettings(s);
        have_settings = true;
      }
    }
    std::map<std::string, int> domains;
    auto add = [&](DomainSpec d) {
      auto [it, fresh] = domains.emplace(d.domain, d.line);
      if (!fresh) {
        FailAt(d.line, "duplicate domain '" + d.domain + "' (first defined on line " +
                           std::to_string(it->second) + ")");
      }
      c.domains.push_back(std::move(d));
    };
    for (const YAML::Node& doc : docs) {
      if (doc.IsNull()) continue;
      if (doc["domain"] || doc["descriptors"]) {
        if (doc["domain"]) {
          DomainSpec d;
          d.line = Line(doc);
          d.domain = Str(doc["domain"], "domain");
          if (d.domain.empty()) Fail(doc["domain"], "domain must not be empty");
          if (doc["descriptors"])
            d.descriptors = ParseDescriptors(doc["descriptors"], c.settings, 0);
          add(std::move(d));
        } else {
          Fail(doc["descriptors"], "descriptors without a 'domain'");
        }
      }
      if (const YAML::Node list = doc["domains"]) {
        if (!list.IsSequence()) Fail(list, "domains must be a list of {domain, descriptors}");
        for (const auto& item : list) add(ParseDomain(item, c.settings));
      }
    }
    if (c.domains.empty()) FailAt(0, "no domain is configured (add 'domain:' or 'domains:')");
    ValidatePolicies(c);
    return c;
  }

  // Rules naming the same `policy` in one domain must agree on the policy's parameters,
  // because they share its counters.
  void ValidatePolicies(const Config& c) {
    for (const DomainSpec& d : c.domains) {
      std::map<std::string, const RateLimitSpec*> named;
      std::vector<const DescriptorSpec*> stack;
      for (const auto& x : d.descriptors) stack.push_back(&x);
      while (!stack.empty()) {
        const DescriptorSpec* x = stack.back();
        stack.pop_back();
        for (const auto& y : x->descriptors) stack.push_back(&y);
        for (const RateLimitSpec* rp : LimitsOf(*x)) {
          const RateLimitSpec& r = *rp;
          if (r.unlimited || r.policy.empty()) continue;
          auto [it, fresh] = named.emplace(r.policy, &r);
          if (fresh) continue;
          const RateLimitSpec& o = *it->second;
          if (o.algorithm != r.algorithm || o.unit != r.unit ||
              o.unit_multiplier != r.unit_multiplier ||
              o.requests_per_unit != r.requests_per_unit || o.burst != r.burst ||
              o.permit_lease != r.permit_lease) {
            FailAt(r.line, "policy '" + r.policy +
                               "' is defined with different parameters on line " +
                               std::to_string(o.line));
          }
        }
      }
    }
  }

 private:
  std::string file_;
};

}  // namespace

Result<Config> ParseConfig(const std::string& text, const std::string& file) {
  // YAML allows no C0 control characters but tab, LF and CR (YAML 1.2, 5.1), and
  // yaml-cpp 0.7 loops without end, allocating, on some inputs with a NUL byte (found by
  // the config fuzzer): such bytes are refused before yaml-cpp sees them.
  // yaml-cpp 0.7 also loops forever on some bytes that are not UTF-8 (0xFF...); a
  // config is UTF-8 text (YAML 1.2, 5.2), so anything else is refused, line by line
  // (no byte of a multi-byte sequence is a newline).
  {
    int n = 1;
    std::size_t begin = 0;
    while (begin <= text.size()) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      if (!core::ValidUtf8(std::string_view(text).substr(begin, end - begin))) {
        return Status::InvalidArgument(file + ":" + std::to_string(n) +
                                       ": not UTF-8 text (a config file must be UTF-8)");
      }
      begin = end + 1;
      ++n;
    }
  }
  int line = 1;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') ++line;
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return Status::InvalidArgument(file + ":" + std::to_string(line) + ": control character " +
                                     hex + " is not allowed in YAML");
    }
  }
  Loader loader(file);
  try {
    return loader.Parse(text);
  } catch (const ConfigError& e) {
    return Status::InvalidArgument(e.message);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(file + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace sluice::service
