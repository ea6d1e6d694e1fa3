// sluiced's rate-limit header fields (service/response_headers.h).
#include "service/response_headers.h"

#include <algorithm>
#include <array>

#include "http/internal.h"
#include "service/plan.h"

namespace sluice::service {

std::string HeaderPolicyName(const Rule& r, std::size_t i) {
  if (!r.name.empty()) return r.name;
  return r.multi ? "d" + std::to_string(i) + "." + std::to_string(r.index)
                 : "d" + std::to_string(i);
}

void AppendHeaders(Settings::Headers mode, const std::vector<HeaderItem>& items,
                   std::size_t binding, std::vector<std::pair<std::string, std::string>>& h) {
  namespace hi = http::internal;
  const Decision& b = items[binding].d;
  std::array<hi::PolicyItem, kMaxChecks> policies;
  std::array<hi::LimitItem, kMaxChecks> states;
  const std::size_t n = std::min(items.size(), kMaxChecks);
  for (std::size_t k = 0; k < n; ++k) {
    policies[k] = {items[k].name, hi::PolicyQuotaWindow(*items[k].policy)};
    states[k] = {items[k].name, items[k].d.remaining, hi::ResetSeconds(items[k].d)};
  }
  if (mode == Settings::Headers::kDraft10) {
    h.emplace_back("ratelimit-policy", hi::FormatRateLimitPolicy({policies.data(), n}));
    h.emplace_back("ratelimit", hi::FormatRateLimit({states.data(), n}));
  } else {
    const std::string prefix =
        mode == Settings::Headers::kRateLimit ? "ratelimit-" : "x-ratelimit-";
    // The binding limit; with several limits, then every limit's quota policy (Envoy's
    // draft-03 form), named when its rule is.
    const std::uint64_t limit = items[binding].policy->Capacity();
    if (n == 1) {
      h.emplace_back(prefix + "limit", std::to_string(limit));
    } else {
      for (std::size_t k = 0; k < n; ++k) {
        if (!items[k].named) policies[k].name = {};
      }
      h.emplace_back(prefix + "limit", hi::FormatLimitList(limit, {policies.data(), n}));
    }
    h.emplace_back(prefix + "remaining", std::to_string(b.remaining));
    h.emplace_back(prefix + "reset", std::to_string(hi::ResetSeconds(b)));
  }
  // A cost above the capacity can never pass: no time to retry after.
  if (!b.allowed && !items[binding].above_capacity) {
    h.emplace_back("retry-after", std::to_string(hi::RetryAfterSeconds(b)));
  }
}

}  // namespace sluice::service
