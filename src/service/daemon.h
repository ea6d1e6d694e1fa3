// The sluiced process minus main(): loads the config, opens the store, starts the gRPC
// and HTTP servers, reloads, and shuts down gracefully. Tests run it in process.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

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
  // Tests: the clock every limiter uses (default SteadyEpochClock).
  std::shared_ptr<const Clock> clock;
};

// Opens the store a URL names: empty or memory:// for the embedded store, redis:// or
// unix:// for Redis (when this build has the Redis store).
Result<std::shared_ptr<Store>> OpenServiceStore(const std::string& url);

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();

  int http_port() const { return http_->port(); }
  int grpc_port() const { return grpc_->port(); }
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
  // Graceful stop: not ready, stop accepting, finish requests in flight.
  void Shutdown();

 private:
  Daemon() = default;
  void ApplyOverrides(Settings& s) const;
  bool FileChanged();
  Status Apply(Result<Config> config, const char* reason);

  DaemonOptions options_;
  std::string store_url_;
  std::string http_addr_, grpc_addr_;
  Settings started_;  // what the servers were started with
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::atomic<bool> ready_{false};
  struct FileId {
    long long mtime_ns = 0, size = 0, ino = 0;
    bool operator==(const FileId&) const = default;
  };
  FileId file_id_;
  std::unique_ptr<ConfigFileWatcher> watcher_;
  bool stopped_ = false;
};

}  // namespace sluice::service
