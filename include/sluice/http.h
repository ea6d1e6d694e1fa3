// sluice/http.h: rate limiting in front of an HTTP application, framework-neutral.
//
// An adapter (sluice_http/httplib.h, sluice_http/beast.h) turns its framework's request
// into an http::Request view and calls Middleware::Check once per request, before any
// handler runs. Check finds the route, builds the caller keys (client IP, API key, user,
// route), asks the Limiter for every limit of the route at once, and returns a Verdict:
// either "pass, and add these headers to your response" or a complete 429 / 400 / 503
// response (RFC 9457 problem+json body, Retry-After, RateLimit headers).
//
//   sluice::http::MiddlewareOptions o;
//   o.limiter = std::move(limiter);                        // any store
//   o.default_limits = {{.policy = "api"}};                // keyed by client IP
//   auto mw = sluice::http::Middleware::Create(std::move(o)).value();
//
// docs/http.md explains keys, headers, proxies and the adapters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limiter.h"
#include "sluice/permit.h"
#include "sluice/status.h"

namespace sluice::http {

// Read access to a request's header fields; each adapter implements it over its
// framework's header map. Must be safe to call from the thread running Check.
class HeaderReader {
 public:
  virtual ~HeaderReader() = default;
  // The `index`-th field named `name` (case-insensitive), counting in the order received,
  // or false when there are fewer. The view must stay valid during Check.
  virtual bool Get(std::string_view name, std::size_t index, std::string_view* value) const = 0;
};

// A view of an incoming request. Nothing is copied; the viewed data must outlive Check.
struct Request {
  std::string_view method;        // "GET"
  std::string_view path;          // "/api/items/7", without the query string
  std::string_view peer_address;  // IP of the TCP peer, "192.0.2.1" or "2001:db8::1" (no port)
  const HeaderReader* headers = nullptr;  // null: the request has no header fields
};

// The identities a key can be built from. A key combines one or more of them, in order.
enum class KeyPart : std::uint8_t {
  kClientIp = 0,  // the client address (see ClientIpOptions), IPv6 grouped by prefix
  kApiKey = 1,    // the value of MiddlewareOptions::api_key_header
  kUser = 2,      // what MiddlewareOptions::user returns
  kRoute = 3,     // the matched route's name (not the raw path: /items/1 and /items/2 share it)
  kMethod = 4,    // the request method
};

// What a limit does when an identity of its key is absent (no API key header, an
// anonymous user).
enum class MissingIdentity : std::uint8_t {
  kUseClientIp = 0,  // key the request by the client IP instead of the missing identity
  kSkip = 1,         // this limit does not apply to the request
};

// One limit applied to a request: a policy of the Limiter and the key it counts under.
struct Limit {
  // The name of one of the Limiter's policies.
  std::string policy;
  // The identities the key is made of, e.g. {kApiKey, kRoute}.
  std::vector<KeyPart> key = {KeyPart::kClientIp};
  MissingIdentity on_missing = MissingIdentity::kUseClientIp;
};

// Charging after the handler (issue #21): for costs known only from the response (the
// tokens an LLM backend used, CPU seconds) or for counting only some outcomes (only
// failed logins). See Route::after and Middleware::Charge; docs/http.md.
struct AfterResponse {
  // The response header whose value is the cost: a decimal integer, 0 to 2^32
  // ("X-Tokens-Used: 5000"). Empty: the route's cost (or MiddlewareOptions::cost). A
  // response without the header charges the route's cost; a bad value (not a number,
  // negative, too large) charges nothing and is counted in MiddlewareStats::bad_costs
  // and passed to MiddlewareOptions::on_bad_cost.
  std::string cost_header;
  // Only responses with one of these statuses are charged (e.g. {401} for a limit on
  // failed logins). Empty: every status.
  std::vector<int> statuses;
};

// A group of requests with its own limits. Routes are tried in order; the first match wins.
struct Route {
  // Used as the kRoute identity and in logs. Default: "<method> <path>".
  std::string name;
  // "" matches every method; otherwise an exact, case-sensitive method ("POST").
  std::string method;
  // An exact path ("/login"), or a prefix when it ends with '*' ("/api/*", "*").
  std::string path = "*";
  // The limits checked, all at once and atomically (all pass or nothing is taken).
  // At most 16, each naming a different policy.
  std::vector<Limit> limits;
  // Units each request takes from every limit (MiddlewareOptions::cost overrides it).
  std::uint64_t cost = 1;
  // Requests of this route are never limited and get no rate-limit headers.
  bool exempt = false;
  // Waiting instead of rejecting (issue #12; nginx's `limit_req ... delay=`): a request
  // over a rate limit is delayed up to this long (µs) when it can pass within it: its
  // budget is reserved at its future slot (Limiter::Reserve) and Verdict::delay says how
  // long the adapter waits before running the application. Beyond it: 429 as usual.
  // Unset: MiddlewareOptions::max_delay. 0: never delay. At most the window of every
  // policy of the route (a reservation waits at most one window; Create says which).
  // A route with a concurrency limit cannot wait for a permit: Create refuses it.
  std::optional<Micros> max_delay;
  // Charge after the handler instead of before it. Check then only asks "is budget
  // left?": it takes nothing and answers 429 while a request of cost 1 could not pass
  // (a key in debt is refused until refill repays it). The adapter calls
  // Middleware::Charge with the response, which takes its cost under each policy's
  // overage (Policy::overage: kCharge takes a cost past the limit as debt, kReject drops
  // a cost that does not fit, kDrain takes what remains). Not with a concurrency limit
  // nor with max_delay (Create refuses them).
  std::optional<AfterResponse> after;
};

// Where the forwarded client address is read from, behind a trusted proxy.
enum class ForwardedHeader : std::uint8_t {
  kXForwardedFor = 0,  // X-Forwarded-For: client, proxy1, proxy2
  kForwarded = 1,      // RFC 7239 Forwarded: for=client, for="[2001:db8::1]:443"
  kNone = 2,           // never read: the client is the TCP peer
};

// How the client address is found.
struct ClientIpOptions {
  // Proxies whose forwarding header is believed: CIDRs or single addresses, IPv4 or IPv6
  // ("10.0.0.0/8", "192.0.2.7", "fd00::/8", "::1"). Empty: the TCP peer is the client and
  // no forwarding header is ever read. The header is walked from the right past trusted
  // hops; the first untrusted hop is the client.
  std::vector<std::string> trusted_proxies;
  ForwardedHeader header = ForwardedHeader::kXForwardedFor;
  // IPv6 clients are grouped by this prefix (1-128), so one host cannot mint keys by
  // rotating addresses inside its /64. IPv4-mapped IPv6 (::ffff:a.b.c.d) counts as IPv4.
  int ipv6_prefix = 64;
  // IPv4 clients are grouped by this prefix (1-32).
  int ipv4_prefix = 32;
  // At most this many forwarding entries are walked (bounds the work per request).
  std::size_t max_hops = 16;
};

// Which rate-limit header fields are sent.
struct HeaderOptions {
  // RateLimit (draft-ietf-httpapi-ratelimit-headers-10): "api";r=9;t=42
  bool ratelimit = true;
  // RateLimit-Policy: "api";q=100;w=60
  bool ratelimit_policy = true;
  // X-RateLimit-Limit / -Remaining / -Reset (seconds until reset), for the binding policy.
  bool legacy = true;
  // Also send the fields above on allowed responses (not only on 429).
  bool on_allowed = true;
  // On a delayed request (max_delay): Server-Timing: ratelimit-delay;dur=<ms>.
  bool delay = true;
};

// Everything Middleware::Create needs: the limiter, the limits per route, how clients
// are identified and which headers are sent. Validated by Create.
struct MiddlewareOptions {
  // Decides. Required. Its store may be in process or Redis.
  std::shared_ptr<Limiter> limiter;
  // Routes, tried in order.
  std::vector<Route> routes;
  // The limits of a request that matches no route. Empty: such requests are not limited.
  std::vector<Limit> default_limits;
  ClientIpOptions client_ip;
  // The header that carries an API key (kApiKey).
  std::string api_key_header = "X-API-Key";
  // Says whether an API key is genuine. A key it rejects counts as missing (see
  // MissingIdentity), so a client cannot mint fresh budgets by inventing keys. Unset:
  // every key is taken as given (only safe when keys were authenticated before the
  // middleware, or when a per-IP limit is checked too). Must not throw.
  std::function<bool(std::string_view)> api_key_valid;
  // Longest accepted API key or user id; a longer one is answered 400.
  std::size_t max_identity_bytes = 128;
  // Returns the user id for kUser, or "" for an anonymous request. Called once per
  // request that needs it. Must not throw.
  std::function<std::string(const Request&)> user;
  // Returns the cost of a request (overrides Route::cost). Must not throw; a cost above
  // a policy's capacity is answered 500 (a configuration error).
  std::function<std::uint64_t(const Request&)> cost;
  // Clients never limited: CIDRs or addresses, matched against the client address.
  std::vector<std::string> allow_list;
  // Returns true for requests that are never limited. Must not throw.
  std::function<bool(const Request&)> exempt;
  HeaderOptions headers;
  // Shadow mode: decide, count and send headers, but never answer 429.
  bool shadow = false;
  // RFC 9457 problem type of a 429 response.
  std::string problem_type = "https://iana.org/assignments/http-problem-types#quota-exceeded";
  // The max_delay of routes (and of default_limits) that set none, in µs. 0: off. On
  // each route it is capped at the shortest window of the route's policies, and routes
  // with a concurrency limit ignore it.
  Micros max_delay = 0;
  // Where Middleware::Wait waits. Default: SystemSleeper (the calling thread sleeps).
  // Tests pass a ManualSleeper on the limiter's ManualClock (simulated time).
  std::shared_ptr<Sleeper> sleeper;
  // Called (Route::after) with the route's name, the header and its value when a cost
  // header holds no valid cost (the response is then charged nothing), e.g. to log it.
  // Unset: only MiddlewareStats::bad_costs counts it. Must not throw.
  std::function<void(std::string_view route, std::string_view header, std::string_view value)>
      on_bad_cost;
};

// What the adapter must do with a request.
struct Verdict {
  // 0: run the application and add `headers` to its response. Otherwise answer with
  // this status (429 limited, 503 store down under fail-closed, 400 bad identity, 500
  // misconfiguration), `headers`, `content_type` and `body`, without the application.
  int status = 0;
  // Field names are static strings (valid for the life of the program).
  std::vector<std::pair<std::string_view, std::string>> headers;
  std::string content_type;
  std::string body;
  // The binding decision, when a limit was checked.
  bool checked = false;
  Decision decision;
  // Passing after a wait (Route::max_delay): the request's budget is reserved at a slot
  // `delay` µs from now; run the application only after waiting that long
  // (Middleware::Wait, which the adapters call). 0: go ahead now.
  Micros delay = 0;
  // A route with a concurrency limit: the permit held while the application runs. Keep
  // the Verdict (or move the permit out) until the response has been sent: destroying it
  // releases the permit (the adapters do so after sending). Empty otherwise.
  Permit permit;
  // Route::after: the limits Middleware::Charge takes the response's cost from (policy
  // index and key), the route (its index in MiddlewareOptions::routes) and the cost
  // charged when the response has no cost header. Empty otherwise, and once charged (a
  // Verdict is charged at most once).
  std::vector<std::pair<std::size_t, std::string>> deferred;
  std::size_t deferred_route = 0;
  std::uint64_t deferred_cost = 0;

  bool pass() const { return status == 0; }
};

// Monotonic counters.
struct MiddlewareStats {
  std::uint64_t requests = 0;
  std::uint64_t allowed = 0;
  std::uint64_t limited = 0;         // answered 429
  std::uint64_t shadow_limited = 0;  // would have been 429 (shadow mode)
  std::uint64_t unavailable = 0;     // answered 503: store failed and a policy fails closed
  std::uint64_t exempt = 0;          // exempt route, allow list or exempt function
  std::uint64_t bad_requests = 0;    // answered 400
  std::uint64_t errors = 0;          // answered 500
  std::uint64_t fail_open = 0;       // allowed because the store failed (fail-open)
  std::uint64_t delayed = 0;         // allowed after a wait (max_delay); counted in allowed too
  // Route::after (Middleware::Charge):
  std::uint64_t charged = 0;        // responses whose cost was charged (a cost of 0 too)
  std::uint64_t not_counted = 0;    // responses whose status the route does not count
  std::uint64_t bad_costs = 0;      // cost header not a valid cost: nothing charged
  std::uint64_t charge_errors = 0;  // the limiter failed to charge (store error, bad key)
};

// Thread-safe; Check may run concurrently on any number of threads. Never throws.
class Middleware {
 public:
  // Validates the options: a limiter, known and distinct policy names per route, valid
  // CIDRs and prefixes. Errors name the field, e.g. "routes[1].limits[0]: no policy
  // named 'x'".
  static Result<std::unique_ptr<Middleware>> Create(MiddlewareOptions options);
  ~Middleware();
  Middleware(const Middleware&) = delete;
  Middleware& operator=(const Middleware&) = delete;

  // Decides one request. Waits at most as long as the Limiter does (the store's call
  // deadline); a store failure is decided by the policy's FailureMode.
  Verdict Check(const Request& request) const;

  // Waits `verdict.delay` through MiddlewareOptions::sleeper (returns at once when 0).
  // Called by the adapters between Check and the application.
  void Wait(const Verdict& verdict) const;

  // Route::after: takes the cost of the response (`status`, and its header fields in
  // `response_headers`, which may be null) from the limits of `verdict`, with each
  // policy's overage, and clears verdict.deferred so a second call charges nothing.
  // Called by the adapters once the handler has answered. Returns the binding decision
  // after the charge; a Decision with allowed = true and nothing checked when nothing
  // was to be charged (no deferred limits, a status not counted, a cost of 0).
  // Errors: InvalidArgument naming the header for a bad cost value (nothing charged);
  // the limiter's errors as they are (a store failure: the cost may not be charged).
  Result<Decision> Charge(Verdict& verdict, int status, const HeaderReader* response_headers) const;

  // The client address `request` is keyed by, after proxies and prefix grouping, as it
  // appears in keys ("192.0.2.1", "2001:db8:1:2::/64").
  std::string ClientIp(const Request& request) const;

  MiddlewareStats Stats() const;
  const MiddlewareOptions& options() const;

 private:
  struct Impl;
  explicit Middleware(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::http
