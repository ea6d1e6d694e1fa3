// The middleware's compiled state, shared by middleware.cc (Create, Check) and
// charge_after.cc (Middleware::Charge, Route::after).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/internal.h"
#include "sluice/http.h"
#include "sluice/limiter.h"

namespace sluice::http {
namespace internal {

inline constexpr std::size_t kMaxLimits = kMaxBatchChecks;

struct CompiledLimit {
  std::size_t policy = 0;
  std::vector<KeyPart> key;
  MissingIdentity on_missing = MissingIdentity::kUseClientIp;
};

struct CompiledRoute {
  std::string name;
  std::string method;
  std::string path;  // without the trailing '*'
  bool prefix = false;
  std::vector<CompiledLimit> limits;
  std::uint64_t cost = 1;
  bool exempt = false;
  bool needs_user = false;
  bool needs_api_key = false;
  // Route::after: Check only looks; Middleware::Charge takes the response's cost.
  bool after = false;
  std::size_t index = 0;  // in MiddlewareOptions::routes
  std::string cost_header;
  std::vector<int> statuses;  // empty: every status is charged
  // Issue #12: a limit of the route is a concurrency limit (a permit is held while the
  // application runs), and how long a request over a rate limit may be delayed.
  bool concurrency = false;
  Micros max_delay = 0;
  // The route's RateLimit-Policy value: it never changes, so it is built once.
  std::string policy_field;

  bool Matches(std::string_view m, std::string_view p) const {
    if (!method.empty() && method != m) return false;
    if (prefix) return p.substr(0, path.size()) == path;
    return p == path;
  }
};

// Route::after's settings into `r`: Ok, or InvalidArgument naming `where` (a concurrency
// limit, max_delay, a status outside 100-599, a bad header name).
Status CompileAfter(const AfterResponse& after, CompiledRoute& r, const std::string& where);

// The cost in a cost header's value: a decimal integer 0..2^32, optional whitespace
// around it; nullopt for anything else (a sign, a fraction, an empty value, too large).
std::optional<std::uint64_t> ParseCost(std::string_view value);

}  // namespace internal

struct Middleware::Impl {
  MiddlewareOptions options;
  internal::CidrSet trusted;
  internal::CidrSet allow;
  std::vector<internal::CompiledRoute> routes;
  internal::CompiledRoute fallback;  // default_limits; matches everything
  std::string forwarded_name;
  std::vector<internal::QuotaWindow> quota;  // per limiter policy

  mutable std::atomic<std::uint64_t> requests{0}, allowed{0}, limited{0}, shadow_limited{0},
      unavailable{0}, exempt{0}, bad_requests{0}, errors{0}, fail_open{0}, delayed{0}, charged{0},
      not_counted{0}, bad_costs{0}, charge_errors{0};

  internal::IpAddress PeerAndClient(const Request& r, bool* peer_ok) const;
  Verdict Decide(const Request& r, const internal::CompiledRoute& route,
                 const internal::IpAddress& client) const;
  Verdict Reject(int status, std::string_view title, std::string detail) const;

  // The identities a route's keys may need. Reads them into `api_key` and `user`; a
  // Verdict (400) when one is too long.
  std::optional<Verdict> Identities(const Request& r, const internal::CompiledRoute& route,
                                    std::string_view* api_key, std::string* user) const;
  // The key of every limit of `route` that applies into `keys`, and its check into
  // `checks`; `*n` how many. A Verdict (400) when a key is too long.
  std::optional<Verdict> BuildChecks(const Request& r, const internal::CompiledRoute& route,
                                     const internal::IpAddress& client, std::string_view api_key,
                                     std::string_view user, std::span<std::string> keys,
                                     std::span<::sluice::Check> checks, std::size_t* n) const;
  // Asks the limiter (a permit, a reservation or a plain decision, as the route says)
  // and sets v.decision (and v.permit, v.delay).
  Status Run(const internal::CompiledRoute& route, std::span<const ::sluice::Check> batch,
             std::span<Decision> per, Verdict& v) const;
  // Route::after: the verdict's deferred limits (the route's keys), so that Charge can
  // take the response's cost from them.
  void Defer(Verdict& v, const internal::CompiledRoute& route,
             std::span<const ::sluice::Check> checks) const;
  // The headers, and the 429 / 503 answer of a denial.
  Verdict Answer(Verdict v, const internal::CompiledRoute& route,
                 std::span<const ::sluice::Check> checks, std::span<const Decision> per) const;
};

}  // namespace sluice::http
