// The JSON answers of sluiced's admin listener (issue #24; docs/sluiced.md "Admin API
// and console"). Each works on the engine's current snapshot through the plan step
// (service/plan.h), so what it shows is what a request would meet; none charges a limit.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "service/engine.h"
#include "service/request.h"
#include "sluice/status.h"

namespace sluice::service::admin {

// The loaded limits: per rule its domain, path, name, algorithm, rate, policy, failure
// mode, shadow/quota mode, replaces, block_for, leases.
nlohmann::json Limits(const Engine& engine);

// What `request` would get now, without charging: per descriptor the rules matched
// (those dropped by another's `replaces`, and by which), each store key, algorithm and
// policy, and the store's answer to a peek of each key (cost 0: the decision for a
// request of cost 1); `would_be` is OK or OVER_LIMIT. InvalidArgument as the plan
// step's; a store error is reported in the answer, not returned.
Result<nlohmann::json> Explain(Engine& engine, const RateLimitRequest& request);

// The state of every store key `request` would charge: limit, remaining, used (permits
// held, for a concurrency limit), reset_after_ms, retry_after_ms (for a blocked key the
// time left of its block).
Result<nlohmann::json> Counters(Engine& engine, const RateLimitRequest& request);

// Forgets every store key `request` would charge (Engine::ResetKey); `keys` receives
// them (for the audit log). InvalidArgument when the request matches no limit.
Result<nlohmann::json> Reset(Engine& engine, const RateLimitRequest& request,
                             std::vector<std::string>* keys);

// Per rule that has denied, its top limited keys (service/admin_top_keys.h), at most
// `n` each, with the descriptor entries decoded from the key when it is not hashed.
nlohmann::json TopKeysJson(const Engine& engine, std::size_t n);

// Per rule its decision counters; the store's health (calls, mean latency, errors,
// failure-mode decisions, deny cache, leases); the top keys' memory. `store_reachable`
// is the daemon's last probe.
nlohmann::json Stats(Engine& engine, bool store_reachable);

}  // namespace sluice::service::admin
