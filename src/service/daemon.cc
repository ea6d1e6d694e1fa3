// Startup, reload and shutdown of sluiced.
#include "service/daemon.h"

#include <sys/stat.h>

#include <chrono>

#include "service/log.h"
#include "sluice/memory_store.h"
#ifdef SLUICED_HAVE_REDIS
#include "sluice/redis_store.h"
#endif

namespace sluice::service {

Result<std::shared_ptr<Store>> OpenServiceStore(const std::string& url) {
  if (url.empty() || url == "memory://") {
    return std::shared_ptr<Store>(std::make_shared<MemoryStore>());
  }
#ifdef SLUICED_HAVE_REDIS
  return OpenStore(url);
#else
  return Status::InvalidArgument("store '" + url +
                                 "': this sluiced was built without the Redis store; use "
                                 "memory:// (the default)");
#endif
}

void Daemon::ApplyOverrides(Settings& s) const {
  if (options_.http) s.http = *options_.http;
  if (options_.grpc) s.grpc = *options_.grpc;
  if (options_.redis) s.redis = *options_.redis;
}

bool Daemon::FileChanged() {
  struct stat st {};
  FileId id;
  if (::stat(options_.config_file.c_str(), &st) == 0) {
    id.mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000LL + st.st_mtim.tv_nsec;
    id.size = st.st_size;
    id.ino = static_cast<long long>(st.st_ino);
  }
  if (id == file_id_) return false;
  file_id_ = id;
  return true;
}

Result<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon());
  d->options_ = std::move(options);
  for (const auto* a : {&d->options_.http, &d->options_.grpc}) {
    if (*a) {
      if (Status s = ValidateListenAddress(**a); !s.ok()) return s;
    }
  }
  d->FileChanged();
  d->watcher_ = std::make_unique<ConfigFileWatcher>(d->options_.config_file, kConfigSettle);
  auto config = LoadConfig(d->options_.config_file);
  if (!config.ok()) return config.status();
  d->ApplyOverrides(config->settings);
  SetLogLevel(config->settings.log_level);
  d->store_url_ = config->settings.redis;
  auto store = OpenServiceStore(d->store_url_);
  if (!store.ok()) return store.status();
  auto engine = Engine::Create(*config, Engine::Options{*store, d->options_.clock});
  if (!engine.ok()) return engine.status();
  d->engine_ = std::move(*engine);
  const Settings& s = config->settings;
  d->http_addr_ = s.http;
  d->grpc_addr_ = s.grpc;
  d->started_ = s;
  auto grpc = GrpcServer::Start(*d->engine_, s.grpc, s.max_body_bytes);
  if (!grpc.ok()) return grpc.status();
  d->grpc_ = std::move(*grpc);
  auto http = HttpServer::Start(*d->engine_, s.http, s.http_threads, s.max_body_bytes, &d->ready_);
  if (!http.ok()) return http.status();
  d->http_ = std::move(*http);
  d->ready_.store(true);
  Log(LogLevel::kInfo, "started",
      {{"config", d->options_.config_file},
       {"domains", std::to_string(config->domains.size())},
       {"store", d->store_url_.empty() ? "memory://" : d->store_url_},
       {"http", s.http.substr(0, s.http.rfind(':')) + ":" + std::to_string(d->http_port())},
       {"grpc", s.grpc.substr(0, s.grpc.rfind(':')) + ":" + std::to_string(d->grpc_port())}});
  return d;
}

Daemon::~Daemon() {
  Shutdown();
}

Status Daemon::Reload(const char* reason) {
  if (watcher_) watcher_->MarkLoaded();
  return Apply(LoadConfig(options_.config_file), reason);
}

Status Daemon::Apply(Result<Config> config, const char* reason) {
  if (!config.ok()) {
    engine_->metrics().CountReload(false);
    Log(LogLevel::kError, "config_rejected",
        {{"reason", reason}, {"error", config.status().message()}, {"kept", "previous"}});
    return config.status();
  }
  ApplyOverrides(config->settings);
  if (Status s = engine_->Reload(*config); !s.ok()) {
    Log(LogLevel::kError, "config_rejected",
        {{"reason", reason}, {"error", s.message()}, {"kept", "previous"}});
    return s;
  }
  SetLogLevel(config->settings.log_level);
  const Settings& s = config->settings;
  if (s.redis != store_url_ || s.http != http_addr_ || s.grpc != grpc_addr_ ||
      s.max_body_bytes != started_.max_body_bytes || s.http_threads != started_.http_threads) {
    Log(LogLevel::kWarn, "restart_required",
        {{"why",
          "listen addresses, the store URL, max_body_bytes and http_threads change only on "
          "restart"}});
  }
  Log(LogLevel::kInfo, "config_loaded",
      {{"reason", reason},
       {"file", options_.config_file},
       {"domains", std::to_string(config->domains.size())},
       {"generation", std::to_string(engine_->Stats().generation)}});
  return Status::Ok();
}

void Daemon::ReloadIfChanged() {
  if (!watcher_) {
    watcher_ = std::make_unique<ConfigFileWatcher>(options_.config_file, kConfigSettle);
  }
  const Micros now = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  auto config = watcher_->Poll(now);
  if (config.status().code() == ErrorCode::kNotFound) return;
  (void)Apply(std::move(config), "file_changed");
}

void Daemon::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  ready_.store(false);
  Log(LogLevel::kInfo, "shutting_down", {{"why", "finishing requests in flight"}});
  if (grpc_) grpc_->Shutdown(5'000'000);
  if (http_) http_->Stop();
  Log(LogLevel::kInfo, "stopped");
}

}  // namespace sluice::service
