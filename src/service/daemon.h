// The sluiced process minus main(): loads the config, opens the store, starts the gRPC
// and HTTP servers, reloads, and shuts down gracefully. Tests run it in process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "service/admin_server.h"
#include "service/engine.h"
#include "service/grpc_service.h"
#include "service/http_server.h"
#include "sluice/clock.h"
#include "sluice/status.h"

namespace sluice::service {

struct DaemonOptions {
  std::string config_file;
  // Command-line values; they win over the config file's `sluiced:` block.
  std::optional<std::string> http;
  std::optional<std::string> grpc;
  std::optional<std::string> redis;
  // --max-keys: the in-process store's key cap (Settings::max_keys).
  std::optional<std::size_t> max_keys;
  // Tests: the clock every limiter uses (default SteadyEpochClock).
  std::shared_ptr<const Clock> clock;
  // The HTTP front end (threads, timeouts, limits, backlog, connection cap).
  // max_body_bytes comes from the settings.
  HttpOptions http_options;
  // SO_REUSEPORT on the HTTP and gRPC ports (several processes share a port).
  bool reuse_port = false;
  // After SIGTERM: how long /readyz answers 503 (and gRPC health NOT_SERVING) while
  // requests are still served, so load balancers stop sending before sluiced stops.
  Micros drain_period = 0;
  // /readyz answers 200 while the store is unreachable (decisions then follow each
  // rule's failure mode). Default: 503 until the store answers.
  bool ready_while_degraded = false;
  // Benchmarks: also serve sluice.bench.v1.Empty on the gRPC port.
  bool bench_empty_grpc = false;
  // How often the store's reachability is probed (one peek of a probe key).
  Micros store_probe_interval = 1'000'000;
  // The admin listener (service/admin_server.h): off unless `admin` is set.
  std::optional<std::string> admin;
  std::string admin_token_file;
  std::uint64_t admin_rate = 600;  // requests per minute per client address
  // --public-rlconfig: GET /rlconfig on the public HTTP port too.
  bool public_rlconfig = false;
  // Deadline of each Redis call (RedisStoreOptions::call_timeout); 0: the store's
  // default (50 ms). Past it, the rule's failure mode decides.
  Micros redis_timeout = 0;
  // Sockets to Redis shared by every request (RedisStoreOptions::connections); 0: the
  // store's default (2). One by default: every request's call then merges with the
  // others queued on it, which cut Redis's CPU per decision by 14-28 % against two
  // (docs/benchmarks.md), and one socket's I/O thread carries far more than sluiced's
  // request handling can offer.
  int redis_connections = 1;
};

// `url` with any password replaced by "***" (redis://user:***@host:6379), for logs.
std::string MaskStoreUrl(const std::string& url);

// Opens the store a URL names: empty or memory:// for the embedded store (holding at
// most `max_keys` keys), redis:// or unix:// for Redis (when this build has the Redis
// store), with `redis_timeout` and `redis_connections` when not 0 (DaemonOptions).
Result<std::shared_ptr<Store>> OpenServiceStore(const std::string& url, Micros redis_timeout = 0,
                                                std::size_t max_keys = std::size_t{1} << 22,
                                                int redis_connections = 0);

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();

  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_->port(); }
  // The admin listener's port; 0 when it is off.
  int admin_port() const { return admin_ ? admin_->port() : 0; }
  Engine& engine() { return *engine_; }
  // The effective settings (config file plus command line) of the current snapshot.
  Settings settings() const { return engine_->settings(); }

  // Re-reads the config file. On error the running configuration stays and the error
  // (FILE:LINE: why) is logged and returned.
  Status Reload(const char* reason);
  // Reloads when the file's content changed and then stayed the same for
  // kConfigSettle (a file written in place in several steps is never loaded
  // half-written); an invalid config is logged once and the running one stays.
  void ReloadIfChanged();
  static constexpr Micros kConfigSettle = 1'000'000;
  // SIGTERM's first step: /readyz 503 and gRPC health NOT_SERVING while requests are
  // still served. The caller waits options.drain_period, then calls Shutdown().
  void BeginDrain();
  Micros drain_period() const { return options_.drain_period; }
  // Graceful stop: not ready, stop accepting, finish requests in flight.
  void Shutdown();
  // Whether the last probe of the store succeeded.
  bool store_reachable() const { return store_ok_.load(); }

 private:
  Daemon() = default;
  void ApplyOverrides(Settings& s) const;
  bool FileChanged();
  Status Apply(Result<Config> config, const char* reason);
  void UpdateReady();
  void ProbeStore();

  DaemonOptions options_;
  std::string store_url_;
  std::string http_addr_, grpc_addr_;
  Settings started_;  // what the servers were started with
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<AdminServer> admin_;
  std::shared_ptr<Store> store_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> store_ok_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> started_ok_{false};
  std::mutex probe_mu_;
  std::condition_variable probe_cv_;
  bool probe_stop_ = false;  // guarded by probe_mu_
  std::thread probe_;
  struct FileId {
    long long mtime_ns = 0, size = 0, ino = 0;
    bool operator==(const FileId&) const = default;
  };
  FileId file_id_;
  std::unique_ptr<ConfigFileWatcher> watcher_;
  bool stopped_ = false;
};

}  // namespace sluice::service
