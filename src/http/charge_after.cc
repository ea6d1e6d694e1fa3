// Charging after the handler (Route::after, issue #21): Check only looks, and the
// adapter hands the response to Middleware::Charge, which takes its cost (from a
// response header, or the route's) under each policy's overage.
#include <algorithm>
#include <array>
#include <charconv>

#include "http/middleware_impl.h"
#include "sluice/policy.h"

namespace sluice::http {
namespace internal {

namespace {

// A token (RFC 9110 field name): visible ASCII but delimiters.
bool ValidHeaderName(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f ||
        std::string_view("\"(),/:;<=>?@[\\]{}").find(c) != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CompileAfter(const AfterResponse& after, CompiledRoute& r, const std::string& where) {
  if (r.concurrency) {
    return Status::InvalidArgument(
        where +
        ".after: the route has a concurrency limit, whose permit is taken before the "
        "handler (charge after the response on a route without one)");
  }
  if (r.max_delay > 0) {
    return Status::InvalidArgument(where +
                                   ".after: a route charged after the response cannot also wait "
                                   "(max_delay reserves the cost before the handler): set "
                                   "max_delay 0 on it");
  }
  if (!after.cost_header.empty() && !ValidHeaderName(after.cost_header)) {
    return Status::InvalidArgument(where + ".after.cost_header '" + after.cost_header +
                                   "' is not a header field name");
  }
  for (std::size_t i = 0; i < after.statuses.size(); ++i) {
    const int st = after.statuses[i];
    if (st < 100 || st > 599) {
      return Status::InvalidArgument(where + ".after.statuses[" + std::to_string(i) +
                                     "] must be an HTTP status 100-599 (got " + std::to_string(st) +
                                     ")");
    }
  }
  r.after = true;
  r.cost_header = after.cost_header;
  r.statuses = after.statuses;
  return Status::Ok();
}

std::optional<std::uint64_t> ParseCost(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.empty() || v.front() < '0' || v.front() > '9') return std::nullopt;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n > kMaxChargeCost) return std::nullopt;
  return n;
}

}  // namespace internal

void Middleware::Impl::Defer(Verdict& v, const internal::CompiledRoute& route,
                             std::span<const ::sluice::Check> checks) const {
  v.deferred.clear();
  v.deferred.reserve(checks.size());
  for (const ::sluice::Check& c : checks) v.deferred.emplace_back(c.policy, std::string(c.key));
  v.deferred_route = route.index;
  v.deferred_cost = checks.empty() ? 0 : checks.front().cost;
}

Result<Decision> Middleware::Charge(Verdict& verdict, int status,
                                    const HeaderReader* response_headers) const {
  Impl& s = *impl_;
  Decision nothing;
  nothing.allowed = true;
  if (verdict.deferred.empty() || verdict.deferred_route >= s.routes.size()) return nothing;
  // Taken out first: whatever happens below, this verdict is never charged again.
  const auto deferred = std::move(verdict.deferred);
  verdict.deferred.clear();
  const internal::CompiledRoute& route = s.routes[verdict.deferred_route];
  if (!route.statuses.empty() &&
      std::find(route.statuses.begin(), route.statuses.end(), status) == route.statuses.end()) {
    s.not_counted.fetch_add(1, std::memory_order_relaxed);
    return nothing;
  }
  std::uint64_t cost = verdict.deferred_cost;
  std::string_view value;
  if (!route.cost_header.empty() && response_headers != nullptr &&
      response_headers->Get(route.cost_header, 0, &value)) {
    const std::optional<std::uint64_t> parsed = internal::ParseCost(value);
    if (!parsed) {
      s.bad_costs.fetch_add(1, std::memory_order_relaxed);
      if (s.options.on_bad_cost) s.options.on_bad_cost(route.name, route.cost_header, value);
      return Status::InvalidArgument("response header " + route.cost_header + ": '" +
                                     std::string(value.substr(0, 64)) +
                                     "' is not a cost (a whole number 0-" +
                                     std::to_string(kMaxChargeCost) + "); nothing charged");
    }
    cost = *parsed;
  }
  if (cost == 0) {
    s.charged.fetch_add(1, std::memory_order_relaxed);
    return nothing;
  }
  std::array<::sluice::Check, internal::kMaxLimits> checks;
  const std::size_t n = std::min(deferred.size(), checks.size());
  for (std::size_t i = 0; i < n; ++i) {
    checks[i] = ::sluice::Check{deferred[i].first, deferred[i].second, cost};
  }
  auto d = s.options.limiter->Acquire(std::span<const ::sluice::Check>(checks.data(), n));
  (d.ok() ? s.charged : s.charge_errors).fetch_add(1, std::memory_order_relaxed);
  return d;
}

}  // namespace sluice::http
