#include "envoy_rlqs.h"

namespace sluice::testing {

using nlohmann::json;

json RlqsFilter(const RlqsFilterOptions& o) {
  json builder = json::object();
  for (const auto& [k, v] : o.bucket) builder[k] = {{"string_value", v}};
  json settings = {
      {"@type",
       "type.googleapis.com/"
       "envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings"},
      {"bucket_id_builder", {{"bucket_id_builder", builder}}},
      {"reporting_interval", o.reporting_interval}};
  if (!o.no_assignment.is_null()) {
    settings["no_assignment_behavior"] = {{"fallback_rate_limit", o.no_assignment}};
  }
  if (!o.expired.is_null()) {
    settings["expired_assignment_behavior"] = {{"fallback_rate_limit", o.expired}};
    if (!o.expired_timeout.empty()) {
      settings["expired_assignment_behavior"]["expired_assignment_behavior_timeout"] =
          o.expired_timeout;
    }
  }
  // Every request (its :path starts with "/") goes into the one bucket.
  json predicate = {
      {"single_predicate",
       {{"input",
         {{"name", "path"},
          {"typed_config",
           {{"@type", "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput"},
            {"header_name", ":path"}}}}},
        {"value_match", {{"prefix", "/"}}}}}};
  json matcher = {
      {"matcher_list",
       {{"matchers",
         json::array(
             {{{"predicate", predicate},
               {"on_match",
                {{"action", {{"name", "rate_limit_quota"}, {"typed_config", settings}}}}}}})}}}};
  return {{"name", "envoy.filters.http.rate_limit_quota"},
          {"typed_config",
           {{"@type",
             "type.googleapis.com/"
             "envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig"},
            {"rlqs_server", {{"envoy_grpc", {{"cluster_name", "sluiced"}}}}},
            {"domain", o.domain},
            {"bucket_matchers", matcher}}}};
}

EnvoyOptions RlqsEnvoyOptions(const RlqsFilterOptions& o) {
  EnvoyOptions e;
  e.domain = o.domain;
  e.filters_before = json::array({RlqsFilter(o)});
  return e;
}

}  // namespace sluice::testing
