// sluiced's HTTP API: POST /json (envoyproxy/ratelimit's JSON), /v1/check (scripts and
// curl), /nginx/auth/<domain> (nginx auth_request), /metrics, /healthz, /readyz.
//
// Event-driven (Boost.Beast on Asio): a few I/O threads serve every connection, so slow or
// idle clients cost a socket and a timer, never a thread. Decisions use the engine's
// asynchronous path, so no thread waits on Redis either. Keep-alive and HTTP/1.1
// pipelining (answers in request order); limits on the header section (431), the body
// (413), the time to send one request and the time a keep-alive connection may sit idle;
// a cap on open connections answered with 503 and a reason.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/engine.h"
#include "service/http_routes.h"
#include "service/params.h"  // ParseQuery (tests/fuzz/query_fuzz.cc)
#include "sluice/status.h"

namespace sluice::service {

struct HttpOptions {
  // I/O threads; 0 means one per CPU core.
  std::size_t io_threads = 0;
  // listen(2) backlog; SOMAXCONN by default (the kernel caps it at net.core.somaxconn).
  int backlog = 0;
  // SO_REUSEPORT: lets several processes share the port (and split its traffic). Off by
  // default so a second sluiced on a busy port is a startup error.
  bool reuse_port = false;
  // Open connections at most; one more is answered 503 and closed.
  std::size_t max_connections = 10'000;
  // The request line plus headers at most (431 beyond).
  std::size_t max_header_bytes = 16 * 1024;
  // The body at most (413 beyond).
  std::size_t max_body_bytes = 64 * 1024;
  // From a request's first byte to its last (header and body); the connection is closed
  // when a client is slower.
  Micros request_timeout = 10'000'000;
  // How long a keep-alive connection may wait for its next request.
  Micros idle_timeout = 60'000'000;
  // GET /rlconfig on this listener (--public-rlconfig). Off: the rules are listed on the
  // admin listener only (service/admin_server.h).
  bool public_rlconfig = false;
  // The status of a request too large to read (0: 413 for the body, 431 for the header
  // section); the admin listener answers 400 to every bad request.
  int oversize_status = 0;
};

// The routes of a listener other than the API's (the admin listener): called for every
// request with the client's address ("127.0.0.1:40000"); answers through `respond`
// exactly once, inline or from another thread.
using HttpRouter = std::function<void(const http_routes::Request& request, const std::string& peer,
                                      http_routes::Respond respond)>;

class HttpServer {
 public:
  // Binds `addr` (ADDR:PORT; port 0 picks a free one) and serves. A port in use is an
  // error (unless options.reuse_port). `ready` is reported by /readyz (it must outlive the
  // server).
  static Result<std::unique_ptr<HttpServer>> Start(Engine& engine, const std::string& addr,
                                                   const HttpOptions& options,
                                                   const std::atomic<bool>* ready);
  // The same listener serving `router`'s routes instead of the API's.
  static Result<std::unique_ptr<HttpServer>> Start(Engine& engine, const std::string& addr,
                                                   const HttpOptions& options,
                                                   const std::atomic<bool>* ready,
                                                   HttpRouter router);
  ~HttpServer();
  int port() const;
  // Stops accepting, lets requests in flight finish (up to 5 s), closes idle connections,
  // joins the threads. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::service
