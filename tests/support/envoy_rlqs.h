// Envoy's rate limit quota filter (envoy.filters.http.rate_limit_quota) in front of the
// upstream, for sluiced's Rate Limit Quota Service (docs/rlqs.md). It rides on the Envoy
// fixture (envoy.h): the filter goes into EnvoyOptions::filters_before and talks to the
// same "sluiced" gRPC cluster the ratelimit filter uses (which, with no rate_limits on the
// route, calls nothing).
//
//   EnvoyOptions o = RlqsEnvoyOptions({.domain = "edge", .bucket = {{"name", "api"}}});
//   o.upstream_port = upstream.port();
//   o.rls_port = sluiced.grpc_port;
//   auto envoy = Envoy::Start(std::move(o));
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "envoy.h"

namespace sluice::testing {

struct RlqsFilterOptions {
  // The filter's domain (RateLimitQuotaUsageReports.domain).
  std::string domain = "e2e";
  // The bucket id every request is sorted into (static values).
  std::map<std::string, std::string> bucket = {{"name", "api"}};
  // How often Envoy reports usage (a JSON Duration).
  std::string reporting_interval = "1s";
  // RateLimitStrategy JSON before the first assignment (null: Envoy's default, allow
  // all) and after an assignment expired (null: Envoy's default).
  nlohmann::json no_assignment = {{"blanket_rule", "DENY_ALL"}};
  nlohmann::json expired = {{"blanket_rule", "DENY_ALL"}};
  // How long Envoy applies `expired` before it falls back to `no_assignment` (a JSON
  // Duration; empty: Envoy's default, which 1.40 takes as no time at all).
  std::string expired_timeout;
};

// The rate_limit_quota filter as an HTTP filter entry (name + typed_config).
nlohmann::json RlqsFilter(const RlqsFilterOptions& o);

// EnvoyOptions with that filter in filters_before (ports still to fill in).
EnvoyOptions RlqsEnvoyOptions(const RlqsFilterOptions& o);

}  // namespace sluice::testing
