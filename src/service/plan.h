// The plan step of sluiced: a request is validated and matched against a snapshot's
// rules (envoyproxy/ratelimit's walk, `rate_limits`, caller overrides), limits replaced
// by another matched limit are dropped, and each remaining limit becomes a store check
// (its key built from the domain and descriptor entries, its cost from hits_addend).
// The engine (service/engine.h) decides the checks and reports on the plan's slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "decide/decider.h"
#include "service/metrics.h"
#include "service/request.h"
#include "service/rules.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::service {

// The most checks (and descriptors) in one request: one atomic store batch.
inline constexpr std::size_t kMaxChecks = kMaxBatchChecks;
// Entries per descriptor the matcher records a path for (settings.max_entries' bound).
inline constexpr std::size_t kMaxEntries = 64;

// What a plan is for: a rate decision (the Envoy RLS API, /json, /v1/check, nginx), or a
// permit operation on concurrency limits (/v1/acquire, /v1/release, /v1/extend).
struct PlanOp {
  bool permit = false;
  StoreOp op = StoreOp::kDecide;
  std::string_view permit_id;  // the permit's id (permit operations)
};

// A request between matching and deciding. It owns what the decision needs (the rules
// of caller overrides, the store keys, the metric series), so that an asynchronous
// decision outlives the caller's request.
//
// A descriptor matches one rule, or several (`rate_limits`): each matched rule is a
// "slot", in descriptor order then list order, at most kMaxChecks per request.
struct Plan {
  std::size_t n = 0;  // descriptors
  // Per descriptor: its first slot and its number of slots (0: no limit applies).
  std::uint8_t first[kMaxChecks] = {};
  std::uint8_t count[kMaxChecks] = {};
  // The rules of caller overrides, per descriptor; allocated for the first request that
  // has one (a Rule is a few hundred bytes: most requests need none).
  std::unique_ptr<Rule[]> overrides;
  // Per slot: its descriptor, its rule (null: replaced by another matched limit, or a
  // rate limit left alone by a release or an extend), its check, its counters.
  std::size_t nslots = 0;
  std::uint8_t desc[kMaxChecks] = {};
  const Rule* rule[kMaxChecks] = {};
  int check[kMaxChecks] = {};
  DescriptorCounters* counters[kMaxChecks] = {};
  // Per check (slots with the same rule and key share one, costs added).
  decide::Check checks[kMaxChecks];
  std::string keys[kMaxChecks];
  std::size_t nchecks = 0;
  // --- concurrency limits (issue #12) ---
  // The permit operation (acquire, release, extend), its permit id (the checks view
  // it), and how many checks are of concurrency limits, with their shortest lease.
  bool permit_mode = false;
  StoreOp op = StoreOp::kDecide;
  std::string permit_id;
  std::size_t nconcurrency = 0;
  Micros lease = 0;
};

// Builds `plan` for `request` under `rules` (descriptor series of detailed metrics come
// from `metrics`; an unknown domain is counted there). InvalidArgument with a reason
// for bad input: an empty domain, too many descriptors, entries or matched limits, an
// empty entry key, a bad override, a cost that does not fit in 64 bits, a concurrency
// limit on a rate API. Plan::nchecks 0: nothing to decide (unknown domain, no match,
// only unlimited or replaced limits).
Status BuildPlan(const RuleSet& rules, Metrics& metrics, const RateLimitRequest& request,
                 const PlanOp& op, Plan& plan);

// The store key part of a descriptor: its domain and entries escaped and joined (a
// shared_threshold level by its pattern), hashed when longer than kMaxKeyBytes.
void BuildDescriptorKey(std::string_view domain, const DescriptorRequest& d,
                        const Node* const* path, std::string& key);

}  // namespace sluice::service
