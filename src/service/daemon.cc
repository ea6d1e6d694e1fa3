// Startup, reload and shutdown of sluiced.
#include "service/daemon.h"

#include <sys/stat.h>

#include <chrono>
#include <vector>

#include "service/log.h"
#include "sluice/memory_store.h"
#ifdef SLUICED_HAVE_REDIS
#include "sluice/redis_store.h"
#endif

namespace sluice::service {

#ifdef SLUICED_HAVE_REDIS
namespace {
// sluiced starts while Redis is unreachable (decisions follow each rule's failure mode,
// /readyz says not ready, the store reconnects in the background) when the Redis client
// offers it (RedisStoreOptions::require_connection); a template so this builds with a
// client that does not have it yet.
template <typename Options>
void AllowDegradedStart(Options& o) {
  if constexpr (requires { o.require_connection; }) o.require_connection = false;
}
}  // namespace
#endif

Result<std::shared_ptr<Store>> OpenServiceStore(const std::string& url, Micros redis_timeout,
                                                std::size_t max_keys, int redis_connections) {
  if (url.empty() || url == "memory://") {
    return std::shared_ptr<Store>(
        std::make_shared<MemoryStore>(MemoryStoreOptions{.max_keys = max_keys}));
  }
#ifdef SLUICED_HAVE_REDIS
  if (url.starts_with("redis") || url.starts_with("unix://")) {
    RedisStoreOptions o;
    o.url = url;
    if (redis_timeout > 0) o.call_timeout = redis_timeout;
    if (redis_connections > 0) o.connections = redis_connections;
    AllowDegradedStart(o);
    auto s = RedisStore::Create(std::move(o));
    if (!s.ok()) return s.status();
    return std::shared_ptr<Store>(std::move(*s));
  }
  return OpenStore(url);
#else
  (void)redis_timeout;
  (void)redis_connections;
  return Status::InvalidArgument("store '" + url +
                                 "': this sluiced was built without the Redis store; use "
                                 "memory:// (the default)");
#endif
}

std::string MaskStoreUrl(const std::string& url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const std::size_t start = scheme + 3;
  const std::size_t end = std::min(url.find_first_of("/?", start), url.size());
  const std::size_t at = url.rfind('@', end == url.size() ? std::string::npos : end - 1);
  std::string out = url;
  if (at != std::string::npos && at >= start) {
    const std::size_t colon = url.find(':', start);
    // user:password@ keeps the user; a lone password@ is all secret.
    const std::size_t from = colon != std::string::npos && colon < at ? colon + 1 : start;
    out = url.substr(0, from) + "***" + url.substr(at);
  }
  // ?password=... in a query string.
  for (const char* name : {"password=", "pass="}) {
    for (std::size_t p = out.find(name); p != std::string::npos; p = out.find(name, p + 1)) {
      if (p == 0 || (out[p - 1] != '?' && out[p - 1] != '&')) continue;
      const std::size_t v = p + std::string(name).size();
      const std::size_t e = std::min(out.find('&', v), out.size());
      out.replace(v, e - v, "***");
    }
  }
  return out;
}

namespace {

// An error message with the URL's password (if any) masked wherever it appears.
std::string MaskIn(std::string message, const std::string& url) {
  const std::string masked = MaskStoreUrl(url);
  if (masked == url) return message;
  for (std::size_t p = message.find(url); p != std::string::npos;
       p = message.find(url, p + masked.size())) {
    message.replace(p, url.size(), masked);
  }
  return message;
}

}  // namespace

void Daemon::ApplyOverrides(Settings& s) const {
  if (options_.http) s.http = *options_.http;
  if (options_.grpc) s.grpc = *options_.grpc;
  if (options_.redis) s.redis = *options_.redis;
  if (options_.max_keys) s.max_keys = *options_.max_keys;
  if (options_.admin) s.admin = AdminListenAddress(*options_.admin);
  if (!options_.admin_token_file.empty()) s.admin_token_file = options_.admin_token_file;
  if (options_.public_rlconfig) s.public_rlconfig = true;
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
  auto store = OpenServiceStore(d->store_url_, d->options_.redis_timeout, config->settings.max_keys,
                                d->options_.redis_connections);
  if (!store.ok()) {
    return Status(store.status().code(), MaskIn(store.status().message(), d->store_url_));
  }
  d->store_ = *store;
  Engine::Options eo{*store, d->options_.clock};
  eo.fallback_max_keys = config->settings.max_keys;
  auto engine = Engine::Create(*config, std::move(eo));
  if (!engine.ok()) return engine.status();
  d->engine_ = std::move(*engine);
  if (!config->settings.admin.empty()) {
    const AdminOptions ao{.addr = config->settings.admin,
                          .token_file = config->settings.admin_token_file,
                          .requests_per_minute = d->options_.admin_rate};
    auto admin = AdminServer::Start(*d->engine_, ao, &d->store_ok_);
    if (!admin.ok()) return admin.status();
    d->admin_ = std::move(*admin);
  }
  const Settings& s = config->settings;
  d->http_addr_ = s.http;
  d->grpc_addr_ = s.grpc;
  d->started_ = s;
  auto grpc = GrpcServer::Start(*d->engine_, s.grpc, s.max_body_bytes, d->options_.reuse_port,
                                d->options_.bench_empty_grpc);
  if (!grpc.ok()) return grpc.status();
  d->grpc_ = std::move(*grpc);
  HttpOptions ho = d->options_.http_options;
  if (ho.io_threads == 0) ho.io_threads = s.http_io_threads;  // the flag wins
  ho.max_body_bytes = s.max_body_bytes;
  ho.reuse_port = d->options_.reuse_port;
  ho.public_rlconfig = s.public_rlconfig;
  auto http = HttpServer::Start(*d->engine_, s.http, ho, &d->ready_);
  if (!http.ok()) return http.status();
  d->http_ = std::move(*http);
  // The first probe runs before "started", so /readyz is right from the first request.
  d->ProbeStore();
  d->probe_ = std::thread([p = d.get()] {
    std::unique_lock<std::mutex> lock(p->probe_mu_);
    while (!p->probe_cv_.wait_for(lock, std::chrono::microseconds(p->options_.store_probe_interval),
                                  [p] { return p->probe_stop_; })) {
      lock.unlock();
      p->ProbeStore();
      lock.lock();
    }
  });
  d->started_ok_.store(true);
  Log(LogLevel::kInfo, "started",
      {{"config", d->options_.config_file},
       {"domains", std::to_string(config->domains.size())},
       {"store", d->store_url_.empty() ? "memory://" : MaskStoreUrl(d->store_url_)},
       {"store_reachable", d->store_ok_.load() ? "true" : "false"},
       {"http", s.http.substr(0, s.http.rfind(':')) + ":" + std::to_string(d->http_port())},
       {"grpc", s.grpc.substr(0, s.grpc.rfind(':')) + ":" + std::to_string(d->grpc_port())},
       {"admin", d->admin_
                     ? s.admin.substr(0, s.admin.rfind(':')) + ":" + std::to_string(d->admin_port())
                     : std::string("off")}});
  return d;
}

// One peek (cost 0: nothing consumed) of a probe key: the store answers or it does not.
void Daemon::ProbeStore() {
  static const Policy probe = Policy::FixedWindow("sluiced_probe", 1, std::chrono::seconds(1));
  const StoreCheck check{.policy = &probe, .key = "sluiced:probe", .cost = 0};
  Decision out[1];
  const Status s =
      store_->Run(StoreBatch{.checks = std::span<const StoreCheck>(&check, 1), .now = 0}, out);
  const bool ok = s.ok();
  const bool was = store_ok_.exchange(ok);
  if (ok != was && started_ok_.load()) {
    if (ok) {
      Log(LogLevel::kInfo, "store_reachable", {{"store", MaskStoreUrl(store_url_)}});
    } else {
      Log(LogLevel::kWarn, "store_unreachable",
          {{"store", MaskStoreUrl(store_url_)},
           {"error", MaskIn(s.message(), store_url_)},
           {"decisions", "by each rule's failure_mode"}});
    }
  }
  UpdateReady();
}

void Daemon::UpdateReady() {
  const bool ready =
      !draining_.load() && (store_ok_.load() || options_.ready_while_degraded) && http_ != nullptr;
  ready_.store(ready);
  if (grpc_) grpc_->SetServing(ready);
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
      s.max_body_bytes != started_.max_body_bytes ||
      s.http_io_threads != started_.http_io_threads || s.max_keys != started_.max_keys ||
      s.admin != started_.admin || s.admin_token_file != started_.admin_token_file ||
      s.public_rlconfig != started_.public_rlconfig) {
    Log(LogLevel::kWarn, "restart_required",
        {{"why",
          "listen addresses, the store URL, max_body_bytes, http_io_threads, max_keys and the "
          "admin settings change only on restart"}});
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

void Daemon::BeginDrain() {
  if (draining_.exchange(true)) return;
  UpdateReady();
  Log(LogLevel::kInfo, "draining",
      {{"period_ms", std::to_string(options_.drain_period / 1000)},
       {"why", "/readyz 503 and gRPC health NOT_SERVING; requests still served"}});
}

void Daemon::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  draining_.store(true);
  ready_.store(false);
  {
    std::lock_guard<std::mutex> lock(probe_mu_);
    probe_stop_ = true;
  }
  probe_cv_.notify_all();
  if (probe_.joinable()) probe_.join();
  // A start that failed half-way stops what it started, without claiming it was running.
  const bool was_running = started_ok_.load();
  if (was_running) Log(LogLevel::kInfo, "shutting_down", {{"why", "finishing requests in flight"}});
  if (grpc_) grpc_->Shutdown(5'000'000);
  if (http_) http_->Stop();
  if (admin_) admin_->Stop();
  if (was_running) Log(LogLevel::kInfo, "stopped");
}

}  // namespace sluice::service
