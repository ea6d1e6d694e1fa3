// What every sluiced entry point (gRPC RLS, /json, /v1/check, nginx, /v1/acquire...)
// hands the engine, and what it answers: a request's descriptors with their costs and
// overrides, and per-descriptor statuses with the response headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/config.h"
#include "service/rules.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/policy.h"

namespace sluice::service {

// The largest cost a descriptor's hits_addend (and a /v1/report usage) may ask: 2^32,
// the most a check may cost (sluice::kMaxChargeCost, sluice/policy.h). Envoy's descriptor field is
// a UInt64Value; a larger one is refused with INVALID_ARGUMENT (HTTP 400) instead of being charged
// or wrapped.
inline constexpr std::uint64_t kMaxHitsAddend = kMaxChargeCost;

struct DescriptorRequest {
  std::vector<Entry> entries;
  // The caller's limit override (Envoy's RateLimitDescriptor.limit).
  bool has_override = false;
  std::uint32_t override_requests_per_unit = 0;
  int override_unit = 0;  // envoy.type.v3.RateLimitUnit
  // Per-descriptor cost; overrides the request's hits_addend.
  bool has_hits_addend = false;
  std::uint64_t hits_addend = 0;
};

struct RateLimitRequest {
  std::string_view domain;
  std::vector<DescriptorRequest> descriptors;
  // Cost for every descriptor; 0 means 1.
  std::uint32_t hits_addend = 0;
  // Decided by the store, never from (nor into) the deny cache: for the RLQS's slices,
  // which refunds may make fit again at any time (decide::Check::skip_deny_cache).
  bool skip_deny_cache = false;
};

enum class Code : int { kUnknown = 0, kOk = 1, kOverLimit = 2 };

struct DescriptorStatus {
  Code code = Code::kOk;
  // False when no limit applied (no match, unlimited, replaced, unknown domain).
  bool has_limit = false;
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::kUnknown;
  std::string name;
  std::uint32_t limit_remaining = 0;
  // What the headers call the limit: the policy's capacity (requests_per_unit for the
  // window algorithms, the burst for token_bucket/gcra), and its window.
  std::uint64_t capacity = 0;
  Micros window = 0;
  Micros duration_until_reset = 0;
  Micros retry_after = 0;
  // Who decided: the store (or this process's lease of it), or a failure mode.
  DecisionSource source = DecisionSource::kStore;
  // Denied because the request's cost is above the capacity: no wait lets it pass (no
  // Retry-After; /v1/check says so in "reason").
  bool above_capacity = false;
  // A concurrency limit (issue #12): requests_per_unit and capacity are its most permits
  // held at once, limit_remaining its free permits, window its lease; unit is unknown.
  bool concurrency = false;
  // A descriptor with several limits (`rate_limits`): each one's status, in list order
  // (replaced ones left out); the fields above are then the binding one's (a denial
  // with the longest wait, else the least remaining). Empty for a single limit.
  std::vector<DescriptorStatus> limits;
  // The matched descriptor's `metadata` (JSON object text) when its code is OK; the
  // gRPC answer merges these into the response's dynamic metadata.
  std::string metadata;
};

struct RateLimitResponse {
  Code overall_code = Code::kOk;
  std::vector<DescriptorStatus> statuses;
  // Headers for the client (x-ratelimit-*, retry-after), when enabled.
  std::vector<std::pair<std::string, std::string>> response_headers;
};

// --- concurrency limits (issue #12): /v1/acquire, /v1/release, /v1/extend ---
// The answer to AcquireAsync / PermitAsync.
struct PermitResponse {
  // Acquire: every descriptor's status, as ShouldRateLimit reports it (a concurrency
  // limit's remaining is its free permits, its retry_after the time until the earliest
  // held permit expires).
  RateLimitResponse rate;
  // Acquire, when allowed: the permit token to release or extend with (its id and the
  // request's descriptors, so that a release needs nothing else).
  std::string permit;
  // Acquire and extend: the shortest lease of the concurrency limits, i.e. how long the
  // permit lives from now unless released or extended.
  Micros lease = 0;
};

}  // namespace sluice::service
