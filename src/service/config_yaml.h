// Internal to sluiced's YAML loader (config.cc, config_rate_limit.cc): reading typed
// fields with errors that name FILE:LINE, and the `rate_limit` blocks.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "service/config.h"

namespace sluice::service::config_internal {

// Thrown inside the loader only (never on the decision path) and turned into a Status.
struct ConfigError {
  std::string message;
};

// Typed fields of a YAML document read from `file`; every failure throws a
// ConfigError naming FILE:LINE.
class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

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
                 std::initializer_list<const char*> allowed) const {
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

  std::string Str(const YAML::Node& n, const char* field) const {
    if (!n.IsScalar()) Fail(n, std::string(field) + " must be a string");
    return n.Scalar();
  }
  bool Bool(const YAML::Node& n, const char* field) const {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True" || s == "TRUE" || s == "yes") return true;
      if (s == "false" || s == "False" || s == "FALSE" || s == "no") return false;
    }
    Fail(n, std::string(field) + " must be true or false");
  }
  std::uint64_t Uint(const YAML::Node& n, const char* field, std::uint64_t max) const {
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

 private:
  std::string file_;
};

// The `rate_limit` block `n` of a descriptor, with `s`'s defaults.
RateLimitSpec ParseRateLimit(const YamlReader& y, const YAML::Node& n, const Settings& s);

// `rate_limits: [{...}, ...]` of descriptor `d`.
void ParseRateLimits(const YamlReader& y, const YAML::Node& list, const Settings& s,
                     DescriptorSpec& d);

// `sluiced: rlqs:` (service/rlqs_config.cc).
RlqsSettings ParseRlqsSettings(const YamlReader& y, const YAML::Node& n);

}  // namespace sluice::service::config_internal
