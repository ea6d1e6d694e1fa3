// The framework-neutral middleware: request -> route -> keys and cost -> one atomic
// Limiter::Acquire -> Verdict (headers, or a complete 429/503/400/500 response).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "http/internal.h"
#include "http/middleware_impl.h"
#include "sluice/key.h"

namespace sluice::http {
namespace {

using internal::CompiledLimit;
using internal::CompiledRoute;
using internal::IpAddress;
using internal::kMaxLimits;

std::string Problem(std::string_view type, std::string_view title, int status,
                    std::string_view detail, std::span<const std::string_view> violated) {
  std::string body = "{\"type\":";
  internal::AppendJsonString(body, type);
  body.append(",\"title\":");
  internal::AppendJsonString(body, title);
  body.append(",\"status\":");
  body.append(std::to_string(status));
  body.append(",\"detail\":");
  internal::AppendJsonString(body, detail);
  if (!violated.empty()) {
    body.append(",\"violated-policies\":[");
    for (std::size_t i = 0; i < violated.size(); ++i) {
      if (i) body.push_back(',');
      internal::AppendJsonString(body, violated[i]);
    }
    body.push_back(']');
  }
  body.append("}");
  return body;
}

void AppendPart(std::string& key, std::string_view tag, std::string_view value) {
  if (!key.empty()) key.push_back(':');
  AppendEscaped(key, tag);
  key.push_back(':');
  AppendEscaped(key, value);
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

namespace {

Result<CompiledRoute> CompileRoute(const Limiter& limiter, std::string name, std::string method,
                                   std::string path, const std::vector<Limit>& limits,
                                   std::uint64_t cost, bool exempt, std::optional<Micros> max_delay,
                                   Micros default_max_delay,
                                   const std::optional<AfterResponse>& after,
                                   const std::string& where) {
  CompiledRoute r;
  r.method = std::move(method);
  if (path.empty()) return Status::InvalidArgument(where + ".path must not be empty");
  if (path.back() == '*') {
    r.prefix = true;
    path.pop_back();
  }
  r.path = std::move(path);
  r.name = name.empty() ? (r.method.empty() ? "" : r.method + " ") + r.path + (r.prefix ? "*" : "")
                        : std::move(name);
  r.cost = cost;
  r.exempt = exempt;
  if (limits.size() > kMaxLimits) {
    return Status::InvalidArgument(where + ": at most " + std::to_string(kMaxLimits) +
                                   " limits per route");
  }
  if (cost == 0) return Status::InvalidArgument(where + ".cost must be at least 1");
  std::vector<internal::PolicyItem> items;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const Limit& l = limits[i];
    const std::string lw = where + ".limits[" + std::to_string(i) + "]";
    auto idx = limiter.FindPolicy(l.policy);
    if (!idx.ok()) return Status::InvalidArgument(lw + ": no policy named '" + l.policy + "'");
    for (const CompiledLimit& c : r.limits) {
      if (c.policy == *idx) {
        return Status::InvalidArgument(lw + ": policy '" + l.policy + "' is used twice");
      }
    }
    if (l.key.empty()) return Status::InvalidArgument(lw + ".key must name at least one part");
    for (KeyPart p : l.key) {
      if (p == KeyPart::kUser) r.needs_user = true;
      if (p == KeyPart::kApiKey) r.needs_api_key = true;
    }
    r.limits.push_back({*idx, l.key, l.on_missing});
    const Policy& p = limiter.policies()[*idx];
    if (p.algorithm == Algorithm::kConcurrency) r.concurrency = true;
    items.push_back({p.name, internal::PolicyQuotaWindow(p)});
  }
  r.policy_field = internal::FormatRateLimitPolicy(items);
  if (max_delay && *max_delay < 0) {
    return Status::InvalidArgument(where + ".max_delay must not be negative (got " +
                                   std::to_string(*max_delay) + "us)");
  }
  if (max_delay && *max_delay > 0 && r.concurrency) {
    return Status::InvalidArgument(
        where +
        ".max_delay: the route has a concurrency limit, and a request cannot wait for a permit "
        "(set max_delay 0 on it, or move the concurrency limit to a route of its own)");
  }
  // A reservation waits at most one window of each policy.
  Micros shortest = 0;
  std::string shortest_name;
  for (const CompiledLimit& c : r.limits) {
    const Policy& p = limiter.policies()[c.policy];
    if (shortest_name.empty() || p.window < shortest) {
      shortest = p.window;
      shortest_name = p.name;
    }
  }
  if (max_delay && *max_delay > 0 && !shortest_name.empty() && *max_delay > shortest) {
    return Status::InvalidArgument(where + ".max_delay " + std::to_string(*max_delay) +
                                   "us exceeds the window " + std::to_string(shortest) +
                                   "us of policy '" + shortest_name +
                                   "' (a reservation waits at most one window)");
  }
  // The middleware-wide default applies to routes it can apply to, capped per route.
  r.max_delay =
      max_delay ? *max_delay : (r.concurrency ? 0 : std::min(default_max_delay, shortest));
  if (after) {
    if (Status s = internal::CompileAfter(*after, r, where); !s.ok()) return s;
  }
  return r;
}

}  // namespace

Result<std::unique_ptr<Middleware>> Middleware::Create(MiddlewareOptions options) {
  if (!options.limiter) return Status::InvalidArgument("limiter is required");
  auto impl = std::make_unique<Impl>();
  const ClientIpOptions& ci = options.client_ip;
  if (ci.ipv6_prefix < 1 || ci.ipv6_prefix > 128) {
    return Status::InvalidArgument("client_ip.ipv6_prefix must be 1-128 (got " +
                                   std::to_string(ci.ipv6_prefix) + ")");
  }
  if (ci.ipv4_prefix < 1 || ci.ipv4_prefix > 32) {
    return Status::InvalidArgument("client_ip.ipv4_prefix must be 1-32 (got " +
                                   std::to_string(ci.ipv4_prefix) + ")");
  }
  if (ci.max_hops < 1) return Status::InvalidArgument("client_ip.max_hops must be at least 1");
  auto trusted = internal::CidrSet::Parse(ci.trusted_proxies, "client_ip.trusted_proxies");
  if (!trusted.ok()) return trusted.status();
  impl->trusted = std::move(trusted).value();
  auto allow = internal::CidrSet::Parse(options.allow_list, "allow_list");
  if (!allow.ok()) return allow.status();
  impl->allow = std::move(allow).value();
  if (options.api_key_header.empty()) {
    return Status::InvalidArgument("api_key_header must not be empty");
  }
  if (options.max_identity_bytes < 1 || options.max_identity_bytes > kMaxKeyBytes) {
    return Status::InvalidArgument("max_identity_bytes must be 1-" + std::to_string(kMaxKeyBytes));
  }
  const Limiter& limiter = *options.limiter;
  for (std::size_t i = 0; i < options.routes.size(); ++i) {
    const Route& r = options.routes[i];
    auto c =
        CompileRoute(limiter, r.name, r.method, r.path, r.limits, r.cost, r.exempt, r.max_delay,
                     options.max_delay, r.after, "routes[" + std::to_string(i) + "]");
    if (!c.ok()) return c.status();
    if (c->needs_user && !options.user) {
      return Status::InvalidArgument("routes[" + std::to_string(i) +
                                     "] keys by user but no user function is set");
    }
    c->index = i;
    impl->routes.push_back(std::move(c).value());
  }
  if (options.max_delay < 0) {
    return Status::InvalidArgument("max_delay must not be negative (got " +
                                   std::to_string(options.max_delay) + "us)");
  }
  auto fb = CompileRoute(limiter, "*", "", "*", options.default_limits, 1, false, std::nullopt,
                         options.max_delay, std::nullopt, "default_limits");
  if (!fb.ok()) return fb.status();
  if (fb->needs_user && !options.user) {
    return Status::InvalidArgument("default_limits key by user but no user function is set");
  }
  impl->fallback = std::move(fb).value();
  impl->forwarded_name = ci.header == ForwardedHeader::kForwarded ? "Forwarded" : "X-Forwarded-For";
  for (const Policy& p : limiter.policies()) impl->quota.push_back(internal::PolicyQuotaWindow(p));
  if (!options.sleeper) options.sleeper = std::make_shared<SystemSleeper>();
  impl->options = std::move(options);
  return std::unique_ptr<Middleware>(new Middleware(std::move(impl)));
}

Middleware::Middleware(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Middleware::~Middleware() = default;

const MiddlewareOptions& Middleware::options() const {
  return impl_->options;
}

IpAddress Middleware::Impl::PeerAndClient(const Request& r, bool* peer_ok) const {
  auto peer = internal::ParseIp(r.peer_address);
  *peer_ok = peer.has_value();
  if (!peer) return IpAddress{};
  const ClientIpOptions& ci = options.client_ip;
  if (trusted.empty() || ci.header == ForwardedHeader::kNone || !trusted.Contains(*peer) ||
      r.headers == nullptr) {
    return *peer;
  }
  // Keep the last max_hops fields: the walk never goes further left than that (each
  // field holds at least one entry), so a client cannot push the real hops out by
  // sending many fields.
  std::array<std::string_view, 32> ring;
  const std::size_t keep = std::min(ring.size(), ci.max_hops);
  std::size_t n = 0;
  std::string_view v;
  for (std::size_t i = 0; i < 4096 && r.headers->Get(forwarded_name, i, &v); ++i) {
    ring[n % keep] = v;
    ++n;
  }
  std::array<std::string_view, 32> ordered;
  const std::size_t count = std::min(n, keep);
  for (std::size_t i = 0; i < count; ++i) ordered[i] = ring[(n - count + i) % keep];
  return internal::ResolveClientIp(*peer, trusted, ci.header,
                                   std::span<const std::string_view>(ordered.data(), count),
                                   ci.max_hops, /*truncated=*/n > keep);
}

std::string Middleware::ClientIp(const Request& request) const {
  bool ok = false;
  IpAddress ip = impl_->PeerAndClient(request, &ok);
  if (!ok) return "unknown";
  const ClientIpOptions& ci = impl_->options.client_ip;
  return internal::FormatIp(ip, ip.v4 ? ci.ipv4_prefix : ci.ipv6_prefix);
}

Verdict Middleware::Impl::Reject(int status, std::string_view title, std::string detail) const {
  Verdict v;
  v.status = status;
  v.content_type = "application/problem+json";
  v.body = Problem("about:blank", title, status, detail, {});
  return v;
}

Verdict Middleware::Check(const Request& request) const {
  Impl& s = *impl_;
  s.requests.fetch_add(1, std::memory_order_relaxed);
  const CompiledRoute* route = &s.fallback;
  for (const CompiledRoute& r : s.routes) {
    if (r.Matches(request.method, request.path)) {
      route = &r;
      break;
    }
  }
  if (route->exempt || route->limits.empty()) {
    if (route->exempt) s.exempt.fetch_add(1, std::memory_order_relaxed);
    s.allowed.fetch_add(1, std::memory_order_relaxed);
    return Verdict{};
  }
  bool peer_ok = false;
  const IpAddress client = s.PeerAndClient(request, &peer_ok);
  if (!peer_ok) {
    // Adapters always know the peer; a missing one is an integration bug, not the client's.
    s.errors.fetch_add(1, std::memory_order_relaxed);
    return s.Reject(500, "Internal Server Error",
                    "rate limiting: the peer address '" + std::string(request.peer_address) +
                        "' is not an IP address");
  }
  if ((!s.allow.empty() && s.allow.Contains(client)) ||
      (s.options.exempt && s.options.exempt(request))) {
    s.exempt.fetch_add(1, std::memory_order_relaxed);
    s.allowed.fetch_add(1, std::memory_order_relaxed);
    return Verdict{};
  }
  return s.Decide(request, *route, client);
}

Verdict Middleware::Impl::Decide(const Request& request, const CompiledRoute& route,
                                 const IpAddress& client) const {
  std::string_view api_key;
  std::string user;
  if (auto bad = Identities(request, route, &api_key, &user)) return std::move(*bad);
  thread_local std::array<std::string, kMaxLimits> keys;
  std::array<::sluice::Check, kMaxLimits> checks;
  std::size_t n = 0;
  if (auto bad = BuildChecks(request, route, client, api_key, user, keys, checks, &n)) {
    return std::move(*bad);
  }
  if (n == 0) {
    allowed.fetch_add(1, std::memory_order_relaxed);
    return Verdict{};
  }
  std::array<Decision, kMaxLimits> per;
  const std::span<const ::sluice::Check> batch(checks.data(), n);
  const std::span<Decision> per_span(per.data(), n);
  Verdict v;
  if (route.after) {
    // Charged after the handler: now only look (cost 0 takes nothing; denied while a
    // request of cost 1 could not pass).
    Defer(v, route, batch);
    for (std::size_t i = 0; i < n; ++i) checks[i].cost = 0;
  }
  if (Status failed = Run(route, batch, per_span, v); !failed.ok()) {
    errors.fetch_add(1, std::memory_order_relaxed);
    return Reject(500, "Internal Server Error", "rate limiting: " + failed.ToString());
  }
  Verdict answer = Answer(std::move(v), route, batch, per_span);
  if (!answer.pass()) answer.deferred.clear();  // not served: nothing to charge
  return answer;
}

std::optional<Verdict> Middleware::Impl::Identities(const Request& request,
                                                    const CompiledRoute& route,
                                                    std::string_view* api_key_out,
                                                    std::string* user_out) const {
  std::string_view& api_key = *api_key_out;
  if (route.needs_api_key && request.headers != nullptr) {
    std::string_view v;
    if (request.headers->Get(options.api_key_header, 0, &v)) api_key = TrimOws(v);
    if (api_key.size() > options.max_identity_bytes) {
      bad_requests.fetch_add(1, std::memory_order_relaxed);
      return Reject(400, "Bad Request",
                    "header " + options.api_key_header + " is longer than " +
                        std::to_string(options.max_identity_bytes) + " bytes");
    }
    if (!api_key.empty() && options.api_key_valid && !options.api_key_valid(api_key)) {
      api_key = {};  // an invented key is no identity
    }
  }
  std::string& user = *user_out;
  if (route.needs_user) {
    user = options.user(request);
    if (user.size() > options.max_identity_bytes) {
      bad_requests.fetch_add(1, std::memory_order_relaxed);
      return Reject(
          400, "Bad Request",
          "the user id is longer than " + std::to_string(options.max_identity_bytes) + " bytes");
    }
  }
  return std::nullopt;
}

std::optional<Verdict> Middleware::Impl::BuildChecks(
    const Request& request, const CompiledRoute& route, const IpAddress& client,
    std::string_view api_key, std::string_view user, std::span<std::string> keys,
    std::span<::sluice::Check> checks, std::size_t* count) const {
  const ClientIpOptions& ci = options.client_ip;
  // Formatted only when a key needs it (an API key alone does not).
  std::string ip_storage;
  auto ip_text = [&]() -> std::string_view {
    if (ip_storage.empty()) {
      ip_storage = internal::FormatIp(client, client.v4 ? ci.ipv4_prefix : ci.ipv6_prefix);
    }
    return ip_storage;
  };

  const std::uint64_t cost = options.cost ? options.cost(request) : route.cost;
  std::size_t& n = *count;
  n = 0;
  for (const CompiledLimit& l : route.limits) {
    std::string& key = keys[n];
    key.clear();
    bool skip = false;
    for (KeyPart p : l.key) {
      std::string_view id;
      std::string_view tag;
      switch (p) {
        case KeyPart::kClientIp:
          tag = "ip";
          id = ip_text();
          break;
        case KeyPart::kApiKey:
          tag = "key";
          id = api_key;
          break;
        case KeyPart::kUser:
          tag = "user";
          id = user;
          break;
        case KeyPart::kRoute:
          tag = "route";
          id = route.name;
          break;
        case KeyPart::kMethod:
          tag = "method";
          id = request.method;
          break;
      }
      if (id.empty()) {
        if (l.on_missing == MissingIdentity::kSkip) {
          skip = true;
          break;
        }
        tag = "ip";
        id = ip_text();
      }
      AppendPart(key, tag, id);
    }
    if (skip) continue;
    if (key.size() > kMaxKeyBytes) {
      bad_requests.fetch_add(1, std::memory_order_relaxed);
      return Reject(400, "Bad Request",
                    "the rate-limit key for policy '" + options.limiter->policies()[l.policy].name +
                        "' is longer than " + std::to_string(kMaxKeyBytes) + " bytes");
    }
    checks[n] = ::sluice::Check{l.policy, key, cost};
    ++n;
  }
  return std::nullopt;
}

Status Middleware::Impl::Run(const CompiledRoute& route, std::span<const ::sluice::Check> batch,
                             std::span<Decision> per_span, Verdict& v) const {
  Status failed;
  if (route.concurrency) {
    // Rate and concurrency limits in one atomic call; the permit (when one was taken)
    // travels in the Verdict and is released once the response is sent.
    auto permit = options.limiter->AcquirePermit(batch, per_span);
    if (permit.ok()) {
      v.decision = permit->decision();
      v.permit = std::move(*permit);
    } else {
      failed = permit.status();
    }
  } else if (route.max_delay > 0) {
    // Waiting instead of rejecting: the budget is taken now at its future slot.
    auto reservation = options.limiter->Reserve(batch, route.max_delay, per_span);
    if (reservation.ok()) {
      v.decision = reservation->decision();
      if (v.decision.allowed) v.delay = v.decision.wait;
    } else {
      failed = reservation.status();
    }
  } else {
    auto result = options.limiter->Acquire(batch, per_span);
    if (result.ok()) {
      v.decision = *result;
    } else {
      failed = result.status();
    }
  }
  return failed;
}

Verdict Middleware::Impl::Answer(Verdict v, const CompiledRoute& route,
                                 std::span<const ::sluice::Check> checks,
                                 std::span<const Decision> per) const {
  const std::size_t n = checks.size();
  v.checked = true;
  const Decision& d = v.decision;
  const auto& policies = options.limiter->policies();

  const bool denied = !d.allowed;
  const bool fail_closed = denied && d.source == DecisionSource::kFailClosed;
  const bool shadowed = (denied && options.shadow) || d.shadow_denied;
  if (d.source == DecisionSource::kFailOpen) fail_open.fetch_add(1, std::memory_order_relaxed);

  // Fields: sent on denials, and on allowed responses unless disabled. A fail-open
  // decision knows nothing about the quota, so it announces nothing.
  const HeaderOptions& ho = options.headers;
  const bool send = (denied || ho.on_allowed) && d.source != DecisionSource::kFailOpen;
  if (send) {
    v.headers.reserve(6);
    if (ho.ratelimit_policy) v.headers.emplace_back("RateLimit-Policy", route.policy_field);
    if (ho.ratelimit) {
      std::array<internal::LimitItem, kMaxLimits> items;
      for (std::size_t i = 0; i < n; ++i) {
        items[i] = {policies[checks[i].policy].name, per[i].remaining,
                    internal::ResetSeconds(per[i])};
      }
      v.headers.emplace_back(
          "RateLimit",
          internal::FormatRateLimit(std::span<const internal::LimitItem>(items.data(), n)));
    }
    if (ho.legacy) {
      v.headers.emplace_back("X-RateLimit-Limit", std::to_string(d.limit));
      v.headers.emplace_back("X-RateLimit-Remaining", std::to_string(d.remaining));
      v.headers.emplace_back("X-RateLimit-Reset", std::to_string(internal::ResetSeconds(d)));
    }
  }

  if (!denied || shadowed) {
    if (shadowed) shadow_limited.fetch_add(1, std::memory_order_relaxed);
    allowed.fetch_add(1, std::memory_order_relaxed);
    if (v.delay > 0) {
      delayed.fetch_add(1, std::memory_order_relaxed);
      if (ho.delay) {
        // Milliseconds, rounded up (Server-Timing's dur is in ms).
        v.headers.emplace_back("Server-Timing",
                               "ratelimit-delay;dur=" + std::to_string((v.delay + 999) / 1000));
      }
    }
    return v;
  }

  const std::int64_t retry = internal::RetryAfterSeconds(d);
  v.headers.emplace_back("Retry-After", std::to_string(retry));
  std::array<std::string_view, kMaxLimits> violated;
  std::size_t nv = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!per[i].allowed) violated[nv++] = policies[checks[i].policy].name;
  }
  const std::string_view binding = policies[d.policy_index].name;
  v.content_type = "application/problem+json";
  if (fail_closed) {
    unavailable.fetch_add(1, std::memory_order_relaxed);
    v.status = 503;
    v.body = Problem("https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
                     "Temporary Reduced Capacity", 503,
                     "the rate limiter's store is unavailable and policy '" + std::string(binding) +
                         "' fails closed; retry after " + std::to_string(retry) + " s",
                     std::span<const std::string_view>(violated.data(), nv));
    return v;
  }
  limited.fetch_add(1, std::memory_order_relaxed);
  v.status = 429;
  v.body = Problem(options.problem_type, "Quota Exceeded", 429,
                   "request cannot be satisfied as the quota of policy '" + std::string(binding) +
                       "' has been exceeded; retry after " + std::to_string(retry) + " s",
                   std::span<const std::string_view>(violated.data(), nv));
  return v;
}

MiddlewareStats Middleware::Stats() const {
  const Impl& s = *impl_;
  MiddlewareStats st;
  st.requests = s.requests.load(std::memory_order_relaxed);
  st.allowed = s.allowed.load(std::memory_order_relaxed);
  st.limited = s.limited.load(std::memory_order_relaxed);
  st.shadow_limited = s.shadow_limited.load(std::memory_order_relaxed);
  st.unavailable = s.unavailable.load(std::memory_order_relaxed);
  st.exempt = s.exempt.load(std::memory_order_relaxed);
  st.bad_requests = s.bad_requests.load(std::memory_order_relaxed);
  st.errors = s.errors.load(std::memory_order_relaxed);
  st.fail_open = s.fail_open.load(std::memory_order_relaxed);
  st.delayed = s.delayed.load(std::memory_order_relaxed);
  st.charged = s.charged.load(std::memory_order_relaxed);
  st.not_counted = s.not_counted.load(std::memory_order_relaxed);
  st.bad_costs = s.bad_costs.load(std::memory_order_relaxed);
  st.charge_errors = s.charge_errors.load(std::memory_order_relaxed);
  return st;
}

void Middleware::Wait(const Verdict& verdict) const {
  if (verdict.delay <= 0) return;
  impl_->options.sleeper->SleepFor(verdict.delay, nullptr);
}

}  // namespace sluice::http
