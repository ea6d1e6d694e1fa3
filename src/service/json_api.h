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

// The response as protobuf's JSON mapping (fields with default values omitted).
std::string RenderJsonResponse(const RateLimitResponse& response);

}  // namespace sluice::service
