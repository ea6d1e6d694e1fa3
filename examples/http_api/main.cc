// sluice_http_api: a small JSON API behind the sluice HTTP middleware (cpp-httplib).
//
//   sluice_http_api                                  # 127.0.0.1:8080, in-process store
//   sluice_http_api --listen 0.0.0.0:9000 --limit 10/s
//   sluice_http_api --redis redis://127.0.0.1:6379   # share the limit between processes
//
// `sluice_http_api --help` shows the policies. docs/http.md explains the middleware.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sluice/http.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/policy.h"
#include "sluice_http/httplib.h"
#ifdef SLUICE_HTTP_API_HAVE_REDIS
#include "sluice/redis_store.h"
#endif

namespace {

httplib::Server* g_server = nullptr;

void OnSignal(int) {
  if (g_server != nullptr) g_server->stop();
}

// "127.0.0.1:8080", "[::1]:8080" -> host, port.
bool ParseListen(const std::string& text, std::string* host, int* port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *port = std::stoi(p);
  if (*port < 1 || *port > 65535) return false;
  *host = h;
  return true;
}

std::string Duration(sluice::Micros us) {
  struct Unit {
    sluice::Micros us;
    const char* name;
  };
  for (Unit u : {Unit{86'400'000'000, "d"}, Unit{3'600'000'000, "h"}, Unit{60'000'000, "min"},
                 Unit{1'000'000, "s"}, Unit{1'000, "ms"}}) {
    if (us % u.us == 0) return std::to_string(us / u.us) + u.name;
  }
  return std::to_string(us) + "us";
}

std::string Describe(const sluice::Policy& p) {
  return "'" + p.name + "' " + sluice::AlgorithmName(p.algorithm) + " " + std::to_string(p.limit) +
         "/" + Duration(p.window) + (p.burst ? " (burst " + std::to_string(p.burst) + ")" : "") +
         ", " + sluice::FailureModeName(p.failure_mode);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:8080";
  std::string redis_url;
  int redis_timeout_ms = 0;
  std::string limit = "100/min";
  std::string algorithm = "sliding_window_counter";
  std::string login_limit = "5/min";
  std::string failure = "fail_open";
  std::uint64_t burst = 0;
  std::vector<std::string> trusted;
  std::vector<std::string> api_keys = {"demo-key"};
  std::string forwarded = "x-forwarded-for";
  bool no_ratelimit = false;
  bool shadow = false;
  std::string headers = "ratelimit,policy,legacy";
  bool headers_on_deny_only = false;
  int threads = 0;

  CLI::App app{
      "A small JSON API behind the sluice rate-limiting middleware.\n\n"
      "Endpoints:\n"
      "  GET  /api/hello        {\"hello\":\"world\"}\n"
      "  GET  /api/items/<id>   {\"id\":\"<id>\"}\n"
      "  POST /api/login        {\"token\":\"...\"}\n"
      "  GET  /api/stats        the middleware's counters\n"
      "  GET  /healthz          never limited\n\n"
      "Policies (change them with the flags below):\n"
      "  api:   --limit (default 100/min) with --algorithm (default sliding_window_counter),\n"
      "         per client: the X-API-Key header when it holds a known key (--api-key),\n"
      "         else the client IP (IPv6 grouped by /64); every request but /healthz.\n"
      "  login: --login-limit (default 5/min, fixed window) per client IP on POST /api/login,\n"
      "         checked together with 'api'.\n"
      "Over a limit: 429 with Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-* and an\n"
      "RFC 9457 problem+json body.",
      "sluice_http_api"};
  app.add_option("--listen", listen, "ADDR:PORT to listen on")->capture_default_str();
  app.add_option("--redis", redis_url,
                 "share the limits through Redis at this URL (redis://host:port[/db]) instead of "
                 "the in-process store");
  app.add_option("--redis-timeout-ms", redis_timeout_ms,
                 "deadline of each Redis call (default 50); past it --failure-mode decides")
      ->check(CLI::Range(1, 60'000));
  app.add_option("--limit", limit, "the 'api' policy's rate, e.g. 100/min, 10/s, 5000/h")
      ->capture_default_str();
  app.add_option("--algorithm", algorithm,
                 "the 'api' policy's algorithm: fixed_window, sliding_window_log, "
                 "sliding_window_counter, token_bucket, gcra")
      ->capture_default_str();
  app.add_option("--burst", burst, "token_bucket/gcra burst (0: same as the limit)")
      ->capture_default_str();
  app.add_option("--login-limit", login_limit, "the 'login' policy's rate (fixed window)")
      ->capture_default_str();
  app.add_option("--failure-mode", failure,
                 "when the store fails: fail_open, fail_closed or local_fallback")
      ->capture_default_str();
  app.add_option("--api-key", api_keys,
                 "an API key clients may send in X-API-Key to get their own budget; repeatable "
                 "(unknown keys are keyed by client IP)")
      ->capture_default_str();
  app.add_option("--trust-proxy", trusted,
                 "a proxy (CIDR or address) whose forwarding header is believed; repeatable");
  app.add_option("--forwarded-header", forwarded,
                 "the header trusted proxies set: x-forwarded-for or forwarded")
      ->capture_default_str();
  app.add_option("--headers", headers,
                 "rate-limit header families, comma-separated: ratelimit (RateLimit), policy "
                 "(RateLimit-Policy), legacy (X-RateLimit-*), or none")
      ->capture_default_str();
  app.add_flag("--headers-on-deny-only", headers_on_deny_only,
               "send the rate-limit headers on 429 responses only");
  app.add_flag("--shadow", shadow, "decide and send headers, but never answer 429");
  app.add_flag("--no-ratelimit", no_ratelimit, "serve without the middleware (benchmark baseline)");
  app.add_option("--threads", threads, "worker threads (0: cpp-httplib's default)");
  CLI11_PARSE(app, argc, argv);

  std::string host;
  int port = 0;
  if (!ParseListen(listen, &host, &port)) {
    std::fprintf(stderr, "sluice_http_api: --listen '%s' is not ADDR:PORT\n", listen.c_str());
    return 2;
  }

  auto fail = [](const std::string& flag, const sluice::Status& s) {
    std::fprintf(stderr, "sluice_http_api: %s: %s\n", flag.c_str(), s.message().c_str());
    return 2;
  };
  auto rate = sluice::ParseRate(limit);
  if (!rate.ok()) return fail("--limit", rate.status());
  auto login_rate = sluice::ParseRate(login_limit);
  if (!login_rate.ok()) return fail("--login-limit", login_rate.status());
  auto algo = sluice::ParseAlgorithm(algorithm);
  if (!algo.ok()) return fail("--algorithm", algo.status());
  auto mode = sluice::ParseFailureMode(failure);
  if (!mode.ok()) return fail("--failure-mode", mode.status());

  sluice::Policy api;
  api.name = "api";
  api.algorithm = *algo;
  api.limit = rate->limit;
  api.window = rate->window;
  api.burst = burst;
  api.failure_mode = *mode;
  sluice::Policy login;
  login.name = "login";
  login.algorithm = sluice::Algorithm::kFixedWindow;
  login.limit = login_rate->limit;
  login.window = login_rate->window;
  login.failure_mode = *mode;

  sluice::LimiterOptions lo;
  lo.policies = {api, login};
  if (!redis_url.empty()) {
#ifdef SLUICE_HTTP_API_HAVE_REDIS
    sluice::RedisStoreOptions ro;
    ro.url = redis_url;
    if (redis_timeout_ms > 0) ro.call_timeout = redis_timeout_ms * 1000LL;
    auto store = sluice::RedisStore::Create(std::move(ro));
    if (!store.ok()) return fail("--redis", store.status());
    lo.store = *store;
#else
    std::fprintf(stderr, "sluice_http_api: --redis: this build has no Redis store\n");
    return 2;
#endif
  } else {
    lo.store = std::make_shared<sluice::MemoryStore>();
  }
  auto limiter = sluice::Limiter::Create(std::move(lo));
  if (!limiter.ok()) return fail("policy", limiter.status());

  sluice::http::MiddlewareOptions mo;
  mo.limiter = std::move(limiter).value();
  mo.routes = {
      {.path = "/healthz", .exempt = true},
      {.method = "POST",
       .path = "/api/login",
       .limits = {{.policy = "api", .key = {sluice::http::KeyPart::kApiKey}}, {.policy = "login"}}},
  };
  mo.default_limits = {{.policy = "api", .key = {sluice::http::KeyPart::kApiKey}}};
  mo.client_ip.trusted_proxies = trusted;
  mo.api_key_valid = [keys = std::set<std::string, std::less<>>(api_keys.begin(), api_keys.end())](
                         std::string_view key) { return keys.find(key) != keys.end(); };
  if (forwarded == "forwarded") {
    mo.client_ip.header = sluice::http::ForwardedHeader::kForwarded;
  } else if (forwarded != "x-forwarded-for") {
    std::fprintf(stderr,
                 "sluice_http_api: --forwarded-header must be x-forwarded-for or forwarded\n");
    return 2;
  }
  mo.shadow = shadow;
  mo.headers.ratelimit = mo.headers.ratelimit_policy = mo.headers.legacy = false;
  for (std::size_t start = 0; start <= headers.size();) {
    std::size_t end = headers.find(',', start);
    if (end == std::string::npos) end = headers.size();
    const std::string family = headers.substr(start, end - start);
    if (family == "ratelimit") {
      mo.headers.ratelimit = true;
    } else if (family == "policy") {
      mo.headers.ratelimit_policy = true;
    } else if (family == "legacy") {
      mo.headers.legacy = true;
    } else if (family != "none") {
      std::fprintf(stderr,
                   "sluice_http_api: --headers: unknown family '%s' (ratelimit, policy, legacy, "
                   "none)\n",
                   family.c_str());
      return 2;
    }
    start = end + 1;
  }
  mo.headers.on_allowed = !headers_on_deny_only;
  auto mw = sluice::http::Middleware::Create(std::move(mo));
  if (!mw.ok()) return fail("middleware", mw.status());
  std::shared_ptr<const sluice::http::Middleware> middleware = std::move(mw).value();

  httplib::Server server;
  // cpp-httplib writes the status line+headers and the body separately; without
  // TCP_NODELAY, Nagle's algorithm holds the body until the client's delayed ACK (~40 ms).
  server.set_tcp_nodelay(true);
  if (threads > 0) {
    server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }
  if (!no_ratelimit) sluice::http::InstallHttplib(server, middleware);
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  server.Get("/api/hello", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"hello\":\"world\"}", "application/json");
  });
  server.Get(R"(/api/items/([A-Za-z0-9_-]{1,64}))",
             [](const httplib::Request& req, httplib::Response& res) {
               res.set_content("{\"id\":\"" + req.matches[1].str() + "\"}", "application/json");
             });
  server.Post("/api/login", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"token\":\"demo\"}", "application/json");
  });
  server.Get("/api/stats", [middleware](const httplib::Request&, httplib::Response& res) {
    const auto s = middleware->Stats();
    res.set_content("{\"requests\":" + std::to_string(s.requests) + ",\"allowed\":" +
                        std::to_string(s.allowed) + ",\"limited\":" + std::to_string(s.limited) +
                        ",\"shadow_limited\":" + std::to_string(s.shadow_limited) +
                        ",\"unavailable\":" + std::to_string(s.unavailable) +
                        ",\"exempt\":" + std::to_string(s.exempt) +
                        ",\"fail_open\":" + std::to_string(s.fail_open) + "}",
                    "application/json");
  });

  if (!server.bind_to_port(host, port)) {
    std::fprintf(stderr, "sluice_http_api: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  g_server = &server;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const auto& policies = middleware->options().limiter->policies();
  std::printf("sluice_http_api listening on %s (%s store%s)\n", listen.c_str(),
              redis_url.empty() ? "in-process" : "redis",
              no_ratelimit ? ", rate limiting OFF" : "");
  for (const auto& p : policies) std::printf("  policy %s\n", Describe(p).c_str());
  std::fflush(stdout);
  server.listen_after_bind();
  return 0;
}
