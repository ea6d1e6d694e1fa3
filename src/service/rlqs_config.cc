#include "service/rlqs_config.h"

#include "service/config_yaml.h"

namespace sluice::service {

namespace config_internal {

RlqsSettings ParseRlqsSettings(const YamlReader& y, const YAML::Node& n) {
  y.CheckKeys(n, "rlqs settings",
              {"descriptor_keys", "slice", "assignment_ttl", "max_buckets_per_stream"});
  RlqsSettings r;
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (k == "descriptor_keys") {
      if (!v.IsSequence()) y.Fail(v, "rlqs.descriptor_keys must be a list of bucket id keys");
      for (const auto& e : v) {
        std::string key = y.Str(e, "rlqs.descriptor_keys entry");
        if (key.empty()) y.Fail(e, "rlqs.descriptor_keys entries must be non-empty");
        for (const std::string& seen : r.descriptor_keys) {
          if (seen == key) y.Fail(e, "rlqs.descriptor_keys lists '" + key + "' twice");
        }
        r.descriptor_keys.push_back(std::move(key));
      }
    } else if (k == "slice") {
      double f = -1;
      try {
        f = v.as<double>();
      } catch (const YAML::Exception&) {
      }
      if (!(f > 0 && f <= 1)) y.Fail(v, "rlqs.slice must be a number in (0, 1]");
      r.slice = f;
    } else if (k == "assignment_ttl") {
      auto us = ParseDuration(y.Str(v, "rlqs.assignment_ttl"));
      if (!us.ok()) y.Fail(v, "rlqs.assignment_ttl: " + us.status().message());
      if (*us < 1'000'000) y.Fail(v, "rlqs.assignment_ttl must be at least 1s");
      r.assignment_ttl = *us;
    } else if (k == "max_buckets_per_stream") {
      r.max_buckets_per_stream = y.Uint(v, "rlqs.max_buckets_per_stream", 1'000'000);
      if (r.max_buckets_per_stream == 0)
        y.Fail(v, "rlqs.max_buckets_per_stream must be at least 1");
    }
  }
  return r;
}

}  // namespace config_internal
}  // namespace sluice::service
