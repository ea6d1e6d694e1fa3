// sluiced's HTTP API: POST /json (envoyproxy/ratelimit's JSON), /v1/check (scripts and
// curl), /nginx/auth/<domain> (nginx auth_request), /metrics, /healthz, /readyz.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "service/engine.h"
#include "sluice/status.h"

namespace sluice::service {

class HttpServer {
 public:
  // Binds `addr` (ADDR:PORT; port 0 picks a free one) and serves on `threads` workers.
  // `ready` is reported by /readyz (it must outlive the server).
  static Result<std::unique_ptr<HttpServer>> Start(Engine& engine, const std::string& addr,
                                                   std::size_t threads, std::size_t max_body_bytes,
                                                   const std::atomic<bool>* ready);
  ~HttpServer();
  int port() const;
  // Stops accepting, lets requests in flight finish, joins the workers.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::service
