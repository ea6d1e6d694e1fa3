// sluiced: the sluice rate-limit daemon. `sluiced --help` lists the flags; docs/sluiced.md
// describes the configuration and every API.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "service/daemon.h"
#include "service/launch.h"
#include "service/log.h"

namespace {

sluice::Micros Seconds(double s) {
  return static_cast<sluice::Micros>(s * 1e6);
}

// Flags of the HTTP front end, the drain and readiness (docs/sluiced.md, "Operations").
void AddServingFlags(CLI::App& app, sluice::service::DaemonOptions& o, double& request_timeout,
                     double& idle_timeout, double& drain, int& redis_timeout_ms) {
  auto& h = o.http_options;
  app.add_option("--http-io-threads", h.io_threads,
                 "HTTP I/O threads (config: sluiced.http_io_threads; default: one per core)");
  app.add_option("--http-backlog", h.backlog, "listen(2) backlog (default SOMAXCONN)");
  app.add_option("--http-max-connections", h.max_connections,
                 "open HTTP connections at most; more are answered 503 (default 10000)");
  app.add_option("--http-max-header-bytes", h.max_header_bytes,
                 "request line + headers at most, 431 beyond (default 16384)");
  app.add_option("--http-request-timeout", request_timeout,
                 "seconds a client may take to send one request, header and body (default 10)");
  app.add_option("--http-idle-timeout", idle_timeout,
                 "seconds a keep-alive connection may wait for its next request (default 60)");
  app.add_flag("--reuse-port", o.reuse_port,
               "SO_REUSEPORT on the HTTP and gRPC ports: several sluiced share a port and split "
               "its traffic (and every limit). Without it a busy port is a startup error");
  app.add_option("--drain-period", drain,
                 "seconds between SIGTERM and stopping: /readyz 503 and gRPC health NOT_SERVING "
                 "while requests are still served (default 0; a second SIGTERM stops at once)");
  app.add_option("--redis-timeout-ms", redis_timeout_ms,
                 "deadline of each Redis call in milliseconds; past it the rule's failure mode "
                 "decides (default 50)")
      ->check(CLI::Range(1, 60'000));
  app.add_option("--redis-connections", o.redis_connections,
                 "sockets to Redis, shared by every request (default 1); more spread the "
                 "client's I/O over more threads, but each Redis call then carries fewer "
                 "decisions")
      ->check(CLI::Range(1, 64));
  app.add_option("--admin-token-file", o.admin_token_file,
                 "bearer tokens of the admin listener, one per line; the file must not be "
                 "readable by group or others");
  app.add_option("--admin-rate", o.admin_rate,
                 "admin requests per minute per client address (default 600)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  app.add_flag("--public-rlconfig", o.public_rlconfig,
               "also serve GET /rlconfig (every loaded rule) on the public --http port, as "
               "before the admin listener; default: admin listener only");
  app.add_flag("--ready-while-degraded", o.ready_while_degraded,
               "/readyz 200 even while the store is unreachable (default: 503)");
  // Benchmarks only (bench/sluiced/run.sh): hidden from --help.
  app.add_flag("--bench-empty-grpc", o.bench_empty_grpc)->group("");
}

// Serves until SIGTERM or SIGINT: reloads on SIGHUP and when the file changes; after a
// SIGTERM with a drain period, drains (not ready, still serving) until the period ends
// or another SIGTERM/SIGINT. `set` holds the blocked signals, taken synchronously here.
void WaitForStop(sluice::service::Daemon& d, const sigset_t& set) {
  using sluice::service::Log;
  using sluice::service::LogLevel;
  int stop_signal = 0;
  for (;;) {
    const sluice::Micros poll = d.settings().reload_poll;
    const sluice::Micros wait = poll > 0 ? poll : 1'000'000;
    timespec ts{static_cast<time_t>(wait / 1'000'000), static_cast<long>(wait % 1'000'000) * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGHUP) {
      (void)d.Reload("sighup");
    } else if (sig == SIGTERM || sig == SIGINT) {
      Log(LogLevel::kInfo, "signal", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      stop_signal = sig;
      break;
    } else if (poll > 0) {
      d.ReloadIfChanged();
    }
  }
  if (stop_signal == SIGTERM && d.drain_period() > 0) {
    // Not ready, still serving, until the period ends or another SIGTERM/SIGINT.
    d.BeginDrain();
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(d.drain_period());
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                            end - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      const long long wait = std::min<long long>(left, 1'000'000);
      timespec ts{static_cast<time_t>(wait / 1'000'000),
                  static_cast<long>(wait % 1'000'000) * 1000};
      const int sig = sigtimedwait(&set, nullptr, &ts);
      if (sig == SIGHUP) {
        (void)d.Reload("sighup");
      } else if (sig == SIGTERM || sig == SIGINT) {
        Log(LogLevel::kInfo, "drain_cut_short",
            {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using sluice::service::Daemon;
  using sluice::service::DaemonOptions;
  using sluice::service::Log;
  using sluice::service::LogLevel;

  CLI::App app{
      "sluiced: rate limiting as a service. Speaks Envoy's rate limit gRPC API\n"
      "(envoy.service.ratelimit.v3.RateLimitService), HTTP JSON (POST /json, /v1/check),\n"
      "nginx auth_request (/nginx/auth/<domain>) and Prometheus (/metrics).\n"
      "Reloads its config on SIGHUP and when the file changes; SIGTERM stops it gracefully.",
      "sluiced"};
  DaemonOptions o;
  std::string http, grpc, redis;
  auto launch = sluice::service::Launch::Attach(app, argc, argv);  // env, --check-config
  app.add_option("-c,--config", o.config_file,
                 "YAML config (envoyproxy/ratelimit format plus a 'sluiced:' settings block)")
      ->required();
  auto* http_opt = app.add_option(
      "--http", http,
      "HTTP listen address ADDR:PORT (config: sluiced.http; default 127.0.0.1:8080)");
  auto* grpc_opt = app.add_option(
      "--grpc", grpc,
      "gRPC listen address ADDR:PORT (config: sluiced.grpc; default 127.0.0.1:8081)");
  auto* redis_opt = app.add_option(
      "--redis", redis,
      "store URL: redis://[user:pass@]host:port[/db] or unix:///path to share limits between "
      "sluiced instances; memory:// for the embedded store (config: sluiced.redis; default "
      "memory://)");
  std::string admin;
  auto* admin_opt = app.add_option(
      "--admin", admin,
      "admin listener ADDR:PORT (a bare PORT means 127.0.0.1:PORT): explain, counters, reset, "
      "limits, top keys, /rlconfig and the console /ui; off unless given; needs "
      "--admin-token-file");
  std::size_t max_keys = 0;
  auto* max_keys_opt = app.add_option(
      "--max-keys", max_keys,
      "key cap of the in-process store (the embedded store, or the local fallback's with "
      "Redis); at the cap a new key is decided by its rule's failure mode (config: "
      "sluiced.max_keys; default 4194304)");
  max_keys_opt->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32));
  double request_timeout = 10, idle_timeout = 60, drain = 0;
  int redis_timeout_ms = 0;
  AddServingFlags(app, o, request_timeout, idle_timeout, drain, redis_timeout_ms);
  CLI11_PARSE(app, argc, argv);
  o.http_options.request_timeout = Seconds(request_timeout);
  o.http_options.idle_timeout = Seconds(idle_timeout);
  o.drain_period = Seconds(drain);
  o.redis_timeout = static_cast<sluice::Micros>(redis_timeout_ms) * 1000;
  if (*http_opt) o.http = http;
  if (*grpc_opt) o.grpc = grpc;
  if (*redis_opt) o.redis = redis;
  if (*max_keys_opt) o.max_keys = max_keys;
  if (*admin_opt) o.admin = admin;
  if (const int rc = launch->Finish(o); rc >= 0) return rc;

  // Signals are taken synchronously by this thread only; every server thread inherits
  // the blocked mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = Daemon::Start(std::move(o));
  if (daemon.ok()) sluice::service::NotifyServiceManager("READY=1\nSTATUS=serving");
  if (!daemon.ok()) {
    Log(LogLevel::kError, "start_failed", {{"error", daemon.status().message()}});
    std::fprintf(stderr, "sluiced: %s\n", daemon.status().message().c_str());
    return 1;
  }
  WaitForStop(**daemon, set);
  (*daemon)->Shutdown();
  return 0;
}
