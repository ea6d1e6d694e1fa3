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
#include "service/config_yaml.h"

namespace sluice::service {
namespace {

using config_internal::ConfigError;
using config_internal::YamlReader;

class Loader : public YamlReader {
 public:
  using YamlReader::YamlReader;

  // `response_headers`: a format name, or a boolean (true: x_ratelimit).
  Settings::Headers ParseResponseHeaders(const YAML::Node& v) {
    const std::string h = v.IsScalar() ? v.Scalar() : std::string();
    if (h == "x_ratelimit") return Settings::Headers::kXRateLimit;
    if (h == "ratelimit") return Settings::Headers::kRateLimit;
    if (h == "draft10") return Settings::Headers::kDraft10;
    if (h == "none") return Settings::Headers::kNone;
    if (h == "true" || h == "false" || h == "yes" || h == "no") {
      return Bool(v, "response_headers") ? Settings::Headers::kXRateLimit
                                         : Settings::Headers::kNone;
    }
    Fail(v, "response_headers must be x_ratelimit, ratelimit, draft10, none, true or false (got '" +
                h + "')");
  }

  Settings ParseSettings(const YAML::Node& n) {
    // Packed by hand: clang-format would give each key a line of its own.
    // clang-format off
    CheckKeys(n, "sluiced settings",
              {"http", "grpc", "redis", "max_body_bytes", "max_descriptors", "max_entries",
               "default_algorithm", "default_failure_mode", "shadow_mode", "response_headers",
               "near_limit_ratio", "reload_poll", "http_threads", "http_io_threads", "max_keys",
               "nginx_headers", "log_level", "admin", "admin_token_file", "public_rlconfig",
               "rlqs"});
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
        s.response_headers = ParseResponseHeaders(v);
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
      } else if (k == "rlqs") {
        s.rlqs = config_internal::ParseRlqsSettings(*this, v);
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
      d.rate_limit = config_internal::ParseRateLimit(*this, r, s);
      d.has_rate_limit = true;
    }
    if (const YAML::Node list = n["rate_limits"])
      config_internal::ParseRateLimits(*this, list, s, d);
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
    c.file = file();
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
