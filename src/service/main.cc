// sluiced: the sluice rate-limit daemon. `sluiced --help` lists the flags; docs/sluiced.md
// describes the configuration and every API.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>

#include "service/daemon.h"
#include "service/launch.h"
#include "service/log.h"

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
  CLI11_PARSE(app, argc, argv);
  if (*http_opt) o.http = http;
  if (*grpc_opt) o.grpc = grpc;
  if (*redis_opt) o.redis = redis;
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
  Daemon& d = **daemon;
  for (;;) {
    const sluice::Micros poll = d.settings().reload_poll;
    const sluice::Micros wait = poll > 0 ? poll : 1'000'000;
    timespec ts{static_cast<time_t>(wait / 1'000'000), static_cast<long>(wait % 1'000'000) * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGHUP) {
      (void)d.Reload("sighup");
    } else if (sig == SIGTERM || sig == SIGINT) {
      Log(LogLevel::kInfo, "signal", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      break;
    } else if (poll > 0) {
      d.ReloadIfChanged();
    }
  }
  d.Shutdown();
  return 0;
}
