// sluiced's GET /v1/check query string (and its form-encoded POST body): ParseQuery,
// then the key/value pairs made into one descriptor and decided, as the handler does.
// A bad escape is an InvalidArgument naming it; decoding never makes anything longer.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "fuzz_engine.h"
#include "service/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& engine = sluice::fuzz::FuzzEngine();
  const std::string_view query(reinterpret_cast<const char*>(data), size);
  auto params = sluice::service::ParseQuery(query);
  if (!params.ok()) {
    FUZZ_CHECK(params.status().code() == sluice::ErrorCode::kInvalidArgument);
    FUZZ_CHECK(!params.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(params->size() <=
             static_cast<std::size_t>(std::count(query.begin(), query.end(), '&')) + 1);
  sluice::service::RateLimitRequest r;
  r.descriptors.resize(1);
  const std::string* key = nullptr;
  for (const auto& [k, v] : *params) {
    FUZZ_CHECK(k.size() + v.size() <= query.size());
    if (k == "domain" && r.domain.empty()) r.domain = v;
    if (k == "key") key = &v;
    if (k == "value" && key != nullptr) {
      r.descriptors[0].entries.push_back(sluice::service::Entry{*key, v});
      key = nullptr;
    }
  }
  if (r.domain.empty() || r.descriptors[0].entries.empty()) return 0;
  sluice::service::RateLimitResponse out;
  const sluice::Status s = engine.ShouldRateLimit(r, &out);
  if (s.ok()) FUZZ_CHECK(out.statuses.size() == 1);
  return 0;
}
