// CPU cost of the HTTP middleware per request, side by side with its reference: the bare
// Limiter::Acquire it wraps (in-process store). The difference is what the middleware
// itself adds (route match, client IP, key building, header formatting).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "sluice/http.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace {

using sluice::Policy;
namespace http = sluice::http;

class Headers final : public http::HeaderReader {
 public:
  std::string xff;
  bool Get(std::string_view name, std::size_t index, std::string_view* value) const override {
    if (index == 0 && !xff.empty() && name == "X-Forwarded-For") {
      *value = xff;
      return true;
    }
    return false;
  }
};

std::shared_ptr<sluice::Limiter> MakeLimiter(std::uint64_t limit) {
  sluice::LimiterOptions o;
  o.policies = {Policy::SlidingWindowCounter("api", limit, std::chrono::minutes(1))};
  return std::shared_ptr<sluice::Limiter>(sluice::Limiter::Create(std::move(o)).value());
}

std::unique_ptr<http::Middleware> MakeMiddleware(std::shared_ptr<sluice::Limiter> limiter,
                                                 bool proxies) {
  http::MiddlewareOptions o;
  o.limiter = std::move(limiter);
  o.routes = {{.path = "/healthz", .exempt = true}};
  o.default_limits = {{.policy = "api"}};
  if (proxies) o.client_ip.trusted_proxies = {"10.0.0.0/8"};
  return http::Middleware::Create(std::move(o)).value();
}

// Reference: the limiter call alone, with the key the middleware would build.
void BM_LimiterAcquire(benchmark::State& state) {
  auto limiter = MakeLimiter(1'000'000'000);
  const std::string key = sluice::JoinKey({"ip", "192.0.2.1"});
  for (auto _ : state) benchmark::DoNotOptimize(limiter->Acquire(key));
}
BENCHMARK(BM_LimiterAcquire);

// The whole middleware, allowed: route, client IP, key, Acquire, five header fields.
void BM_MiddlewareAllowed(benchmark::State& state) {
  auto mw = MakeMiddleware(MakeLimiter(1'000'000'000), false);
  Headers h;
  const http::Request req{"GET", "/api/hello", "192.0.2.1", &h};
  for (auto _ : state) benchmark::DoNotOptimize(mw->Check(req));
}
BENCHMARK(BM_MiddlewareAllowed);

// The 429 path: same, plus Retry-After and the problem+json body.
void BM_MiddlewareDenied(benchmark::State& state) {
  auto mw = MakeMiddleware(MakeLimiter(1), false);
  Headers h;
  const http::Request req{"GET", "/api/hello", "192.0.2.1", &h};
  for (auto _ : state) benchmark::DoNotOptimize(mw->Check(req));
}
BENCHMARK(BM_MiddlewareDenied);

// Behind a trusted proxy: the X-Forwarded-For walk ("client, proxy") added.
void BM_MiddlewareBehindProxy(benchmark::State& state) {
  auto mw = MakeMiddleware(MakeLimiter(1'000'000'000), true);
  Headers h;
  h.xff = "198.51.100.4, 10.0.0.2";
  const http::Request req{"GET", "/api/hello", "10.0.0.1", &h};
  for (auto _ : state) benchmark::DoNotOptimize(mw->Check(req));
}
BENCHMARK(BM_MiddlewareBehindProxy);

// IPv6 client (grouped by /64).
void BM_MiddlewareIpv6(benchmark::State& state) {
  auto mw = MakeMiddleware(MakeLimiter(1'000'000'000), false);
  Headers h;
  const http::Request req{"GET", "/api/hello", "2001:db8:1:2:3:4:5:6", &h};
  for (auto _ : state) benchmark::DoNotOptimize(mw->Check(req));
}
BENCHMARK(BM_MiddlewareIpv6);

// An exempt route: the floor.
void BM_MiddlewareExempt(benchmark::State& state) {
  auto mw = MakeMiddleware(MakeLimiter(1'000'000'000), false);
  const http::Request req{"GET", "/healthz", "192.0.2.1", nullptr};
  for (auto _ : state) benchmark::DoNotOptimize(mw->Check(req));
}
BENCHMARK(BM_MiddlewareExempt);

}  // namespace

BENCHMARK_MAIN();
