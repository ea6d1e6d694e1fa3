// envoyproxy/ratelimit's JSON form of RateLimitRequest / RateLimitResponse (protobuf's
// JSON mapping: lowerCamelCase or original field names in, lowerCamelCase out, enums by
// name, Duration as "1.5s"), parsed and written directly for speed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "service/engine.h"
#include "sluice/status.h"

namespace sluice::service {

// A parsed request; `request` holds views into `doc`.
struct JsonRequest {
  nlohmann::json doc;
  RateLimitRequest request;
};

// Parses `body`. InvalidArgument naming the problem (malformed JSON, an unknown field,
// a wrong type, e.g. "descriptors[0].entries[1].key must be a string").
Status ParseJsonRequest(std::string_view body, std::size_t max_descriptors, JsonRequest* out);

// POST /v1/report's body (issue #21): envoyproxy/ratelimit's JSON request with a
// required "usage" (a whole number 0..kMaxHitsAddend, as a number or a decimal string)
// instead of hits_addend: every descriptor's cost is the usage. InvalidArgument naming
// the problem as ParseJsonRequest, and for a missing, negative, non-numeric or too large
// usage, or a hits_addend (a report's cost is its usage).
Status ParseReportRequest(std::string_view body, std::size_t max_descriptors, JsonRequest* out);

// The response as protobuf's JSON mapping (fields with default values omitted).
std::string RenderJsonResponse(const RateLimitResponse& response);

// GET /v1/check's answer for the request's one descriptor (docs/sluiced.md): allowed,
// code, limited, and for a limited descriptor its binding limit (limit, unit, name,
// remaining, reset_after_ms, retry_after_ms) and, with rate_limits, every limit in
// `limits`. Keys in alphabetical order.
std::string RenderCheckResponse(const RateLimitResponse& response);

// POST /v1/acquire's answer (issue #12): the /v1/check answer for the request's one
// descriptor, plus, when a permit was taken, "lease_ms" and "permit" (the token).
std::string RenderAcquireResponse(const PermitResponse& response);

}  // namespace sluice::service
