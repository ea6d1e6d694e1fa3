// sluiced's POST /json body (envoyproxy/ratelimit's JSON): parsed, then decided by an
// engine, then the answer rendered, as the HTTP handler does. Bad input must be an
// InvalidArgument with a reason, never a crash; a decided request has one status per
// descriptor and renders as JSON that parses.
#include <cstdint>
#include <string_view>

#include "fuzz_engine.h"
#include "service/json_api.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& engine = sluice::fuzz::FuzzEngine();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  sluice::service::JsonRequest parsed;
  sluice::Status s = sluice::service::ParseJsonRequest(body, 64, &parsed);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == sluice::ErrorCode::kInvalidArgument);
    FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  sluice::service::RateLimitResponse out;
  s = engine.ShouldRateLimit(parsed.request, &out);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == sluice::ErrorCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(out.statuses.size() == parsed.request.descriptors.size());
  const std::string rendered = sluice::service::RenderJsonResponse(out);
  FUZZ_CHECK(nlohmann::json::accept(rendered));
  return 0;
}
