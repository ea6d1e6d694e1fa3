// sluiced's admin listener (issue #24; docs/sluiced.md "Admin API and console"): the
// operator's JSON API (explain, counters, reset, limits, top keys, stats), /rlconfig and
// the console page /ui, on its own address (loopback unless told otherwise), off unless
// configured. Every request is rate limited per client address (sluice's own Limiter on
// an in-process store); all but /ui need a bearer token from the token file.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "service/admin_auth.h"
#include "service/engine.h"
#include "service/http_server.h"
#include "sluice/limiter.h"
#include "sluice/status.h"

namespace sluice::service {

struct AdminOptions {
  // ADDR:PORT (AdminListenAddress gives loopback to a bare port).
  std::string addr;
  // The bearer tokens (AdminTokens::Load); required.
  std::string token_file;
  // Requests per minute per client address (a token bucket of this many).
  std::uint64_t requests_per_minute = 600;
  // A larger request body is answered 400 and does nothing.
  std::size_t max_body_bytes = 4096;
};

// "9090" and ":9090" -> "127.0.0.1:9090"; anything else as given.
std::string AdminListenAddress(std::string_view flag);

// The console (GET /ui): one self-contained HTML page, no external asset.
const std::string& ConsolePage();

class AdminServer {
 public:
  // Loads the token file (its errors name it), then listens on options.addr.
  // `store_reachable` (the daemon's last store probe) must outlive the server.
  static Result<std::unique_ptr<AdminServer>> Start(Engine& engine, const AdminOptions& options,
                                                    const std::atomic<bool>* store_reachable);
  ~AdminServer();
  int port() const { return http_->port(); }
  // Stops accepting and finishes requests in flight. Idempotent.
  void Stop();

 private:
  AdminServer(Engine& engine, AdminTokens tokens) : engine_(engine), tokens_(std::move(tokens)) {}
  void Handle(const http_routes::Request& req, const std::string& peer,
              http_routes::Respond respond);
  void Route(const http_routes::Request& req, const std::string& path, std::string_view query,
             const std::string& peer, const std::string& token, http_routes::Respond& respond);

  Engine& engine_;
  AdminTokens tokens_;
  AdminOptions options_;
  const std::atomic<bool>* store_reachable_ = nullptr;
  std::unique_ptr<Limiter> limiter_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace sluice::service
