// HTTP endpoints on Boost.Beast: one strand per connection on a few I/O threads.
//
// A connection's life: wait for the first byte of a request (idle timeout), read the
// header section (size limit, request timeout), maybe answer "100 Continue", read the
// body (size limit, same deadline), decide with Engine::ShouldRateLimitAsync (inline for
// the embedded store; the Redis store answers on its I/O thread and the answer is posted
// back to the connection's strand, so no thread waits on Redis), write, and loop. Bytes of a
// pipelined request already in the buffer are the next request, so pipelined requests are answered
// one by one, in order.
#include "service/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_set>

#include "service/http_routes.h"
#include "service/json_api.h"
#include "service/log.h"

namespace sluice::service {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using http_routes::Dump;
using http_routes::JsonError;
using http_routes::Reply;
using http_routes::Request;
using http_routes::Respond;

namespace {}  // namespace

class Conn;

struct HttpServer::Impl {
  Engine& engine;
  const std::atomic<bool>* ready;
  HttpOptions o;
  HttpRouter router;  // empty: the API's routes (Handle)
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> open{0};
  std::atomic<std::int64_t> last_refusal_log{0};
  std::mutex mu;
  std::condition_variable all_closed;
  std::unordered_set<Conn*> conns;  // guarded by mu
  bool stopped = false;
  int port = 0;
  // Declared after everything a connection touches in its destructor: handlers left in
  // the io_context die with it.
  // One io_context per I/O thread (no locking between threads on the hot path); the
  // acceptor lives on the first, connections are spread round-robin.
  std::vector<std::unique_ptr<asio::io_context>> ctxs;
  std::size_t next_ctx = 0;  // touched only by the acceptor's handler
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::optional<asio::steady_timer> sweeper;
  std::vector<std::thread> threads;

  Impl(Engine& e, const std::atomic<bool>* r, const HttpOptions& opts)
      : engine(e), ready(r), o(opts) {
    for (std::size_t i = 0; i < opts.io_threads; ++i) {
      ctxs.push_back(std::make_unique<asio::io_context>(1));
    }
  }

  void Accept();
  void Refuse(tcp::socket socket);
  void Sweep();
  // Handlers answer through `respond`, exactly once, inline or from the store's thread.
  void Handle(const Request& req, Respond respond);
  // --- concurrency limits (issue #12) ---
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(HttpServer::Impl* s, tcp::socket socket)
      : s_(s),
        socket_(std::move(socket)),
        buffer_(s->o.max_header_bytes + s->o.max_body_bytes + 16 * 1024) {
    s_->open.fetch_add(1);
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->conns.insert(this);
  }
  ~Conn() {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->conns.erase(this);
    if (s_->open.fetch_sub(1) == 1) s_->all_closed.notify_all();
  }

  static std::int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void SetDeadline(Micros from_now) { deadline_ns_.store(NowNs() + from_now * 1000); }
  // From the sweeper: closes the connection if its deadline has passed.
  void CloseIfLate(std::int64_t now_ns) {
    if (deadline_ns_.load() > now_ns) return;
    asio::post(socket_.get_executor(), [self = shared_from_this(), now_ns] {
      if (self->deadline_ns_.load() <= now_ns) self->Close();
    });
  }

  void Start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->ReadNext(); });
  }

  // From Stop(): closes the connection unless a request is being decided or answered
  // (that one finishes and then closes).
  void Interrupt() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->state_ != State::kBusy) self->Close();
    });
  }

 private:
  enum class State { kIdle, kReading, kBusy, kClosed };

  void ReadNext() {
    if (s_->stopping.load()) return Close();
    if (buffer_.size() > 0) return ReadHeader();  // a pipelined request is waiting
    state_ = State::kIdle;
    SetDeadline(s_->o.idle_timeout);
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(s_->o.max_header_bytes));
    parser_->body_limit(s_->o.max_body_bytes);
    SetDeadline(s_->o.request_timeout);
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      return Fail(TooLarge(431), "request header section is larger than max_header_bytes (" +
                                     std::to_string(s_->o.max_header_bytes) + ")");
    }
    if (ec == http::error::body_limit) return BodyTooLarge();  // Content-Length too big
    if (ec == http::error::buffer_overflow) {
      return Fail(TooLarge(431), "request header section is too large");
    }
    if (ec) {
      if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message) {
        return Fail(400, "malformed HTTP request: " + ec.message());
      }
      return Close();  // timeout, reset, end of stream
    }
    const auto& h = parser_->get();
    const auto length = parser_->content_length();
    if (length && *length > s_->o.max_body_bytes) return BodyTooLarge();
    if (h.method() == http::verb::post && !length && !parser_->chunked()) {
      return Fail(411,
                  "POST needs a Content-Length header (or Transfer-Encoding: chunked); send "
                  "Content-Length: 0 for an empty body");
    }
    if (!parser_->is_done() && beast::iequals(h[http::field::expect], "100-continue")) {
      continue_ =
          std::make_unique<http::response<http::empty_body>>(http::status::continue_, h.version());
      return http::async_write(socket_, *continue_,
                               [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 if (ec) return self->Close();
                                 self->ReadBody();
                               });
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) return Dispatch();
    http::async_read(
        socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec == http::error::body_limit) return self->BodyTooLarge();
          if (ec) {
            if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                ec != http::error::end_of_stream && ec != http::error::partial_message) {
              return self->Fail(400, "malformed HTTP request body: " + ec.message());
            }
            return self->Close();
          }
          self->Dispatch();
        });
  }

  // 413 / 431, or 400 on a listener that answers every bad request so (the admin one).
  int TooLarge(int status) const { return s_->o.oversize_status ? s_->o.oversize_status : status; }
  void BodyTooLarge() {
    Fail(TooLarge(413), "request body is larger than max_body_bytes (" +
                            std::to_string(s_->o.max_body_bytes) + ")");
  }

  // An answer to a request that cannot be read on: the connection closes after it.
  void Fail(int status, const std::string& why) {
    state_ = State::kBusy;
    Reply r = JsonError(status, why);
    r.close = true;
    Write(std::move(r));
  }

  void Dispatch() {
    state_ = State::kBusy;
    req_ = parser_->release();
    // An answer given inline (embedded store, bad input, deny cache) is written right
    // after Handle returns; one from another thread is posted to this strand.
    handling_.store(std::this_thread::get_id());
    have_inline_ = false;
    Respond respond = [self = shared_from_this()](Reply r) {
      if (self->handling_.load() == std::this_thread::get_id()) {
        self->inline_reply_ = std::move(r);
        self->have_inline_ = true;
        return;
      }
      asio::post(self->socket_.get_executor(),
                 [self, r = std::move(r)]() mutable { self->Write(std::move(r)); });
    };
    if (s_->router) {
      s_->router(req_, Peer(), std::move(respond));
    } else {
      s_->Handle(req_, std::move(respond));
    }
    handling_.store(std::thread::id());
    if (have_inline_) Write(std::move(inline_reply_));
  }

  std::string Peer() const {
    beast::error_code ec;
    const tcp::endpoint ep = socket_.remote_endpoint(ec);
    if (ec) return "unknown";
    const std::string host = ep.address().to_string();
    return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
  }

  void Write(Reply r) {
    res_ = {};
    const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
    res_.version(version == 10 ? 10 : 11);
    res_.result(static_cast<unsigned>(r.status));
    for (auto& [k, v] : r.headers) res_.insert(k, v);
    if (!r.content_type.empty()) res_.set(http::field::content_type, r.content_type);
    res_.body() = std::move(r.body);
    const bool keep =
        !r.close && !s_->stopping.load() && parser_ && parser_->is_done() && req_.keep_alive();
    res_.keep_alive(keep);
    res_.prepare_payload();
    SetDeadline(s_->o.request_timeout);
    http::async_write(socket_, res_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) return self->Close();
                        if (!self->res_.keep_alive()) return self->Linger();
                        self->ReadNext();
                      });
  }

  // After the last answer: stop sending, then read (and drop) what the client still
  // sends until it closes, so unread bytes do not make the kernel reset the connection
  // before the client has read our answer. Bounded in time and bytes.
  void Linger() {
    state_ = State::kClosed;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    SetDeadline(1'000'000);
    DrainInput(0);
  }
  void DrainInput(std::size_t drained) {
    if (drained > (1u << 20)) return Close();
    socket_.async_read_some(asio::buffer(scratch_), [self = shared_from_this(), drained](
                                                        beast::error_code ec, std::size_t n) {
      if (ec) return self->Close();
      self->DrainInput(drained + n);
    });
  }

  void Close() {
    state_ = State::kClosed;
    deadline_ns_.store(std::numeric_limits<std::int64_t>::max());
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  HttpServer::Impl* s_;
  tcp::socket socket_;
  // When the current read or write must be over (steady clock, ns); the sweeper closes
  // the connection after it. One store per request instead of a timer per operation.
  std::atomic<std::int64_t> deadline_ns_{std::numeric_limits<std::int64_t>::max()};
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Request req_;
  http::response<http::string_body> res_;
  std::unique_ptr<http::response<http::empty_body>> continue_;
  State state_ = State::kIdle;
  std::atomic<std::thread::id> handling_{};
  bool have_inline_ = false;
  Reply inline_reply_;
  char scratch_[4096];
};

void HttpServer::Impl::Accept() {
  asio::io_context& ctx = *ctxs[next_ctx++ % ctxs.size()];
  acceptor->async_accept(ctx, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopping.load()) return;
    if (ec) {
      // Out of file descriptors and the like: log, back off briefly, keep accepting.
      Log(LogLevel::kWarn, "accept_failed", {{"error", ec.message()}});
      accept_retry->expires_after(std::chrono::milliseconds(50));
      accept_retry->async_wait([this](beast::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (open.load() >= o.max_connections) {
      Refuse(std::move(socket));
    } else {
      std::make_shared<Conn>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

// Every 100 ms: closes connections past their deadline (request, idle, write or linger
// timeout).
void HttpServer::Impl::Sweep() {
  sweeper->expires_after(std::chrono::milliseconds(100));
  sweeper->async_wait([this](beast::error_code ec) {
    if (ec || stopping.load()) return;
    const std::int64_t now = Conn::NowNs();
    std::vector<std::shared_ptr<Conn>> live;
    {
      std::lock_guard<std::mutex> lock(mu);
      live.reserve(conns.size());
      for (Conn* c : conns) {
        if (auto sp = c->weak_from_this().lock()) live.push_back(std::move(sp));
      }
    }
    for (auto& c : live) c->CloseIfLate(now);
    live.clear();
    Sweep();
  });
}

// Over the connection cap: a short 503 with the reason, written without waiting (it fits
// in the socket buffer), then close.
void HttpServer::Impl::Refuse(tcp::socket socket) {
  const std::string body =
      Dump(nlohmann::json{{"error", "too many open connections (max_connections " +
                                        std::to_string(o.max_connections) + ")"}});
  const std::string msg =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nRetry-After: 1\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(msg), ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
  const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = last_refusal_log.load();
  if (now != last && last_refusal_log.compare_exchange_strong(last, now)) {
    Log(LogLevel::kWarn, "connection_refused",
        {{"why", "max_connections"}, {"max_connections", std::to_string(o.max_connections)}});
  }
}

void HttpServer::Impl::Handle(const Request& req, Respond respond) {
  try {
    std::string path;
    std::string_view query;
    if (!http_routes::SplitTarget(req, &path, &query)) {
      return respond(JsonError(400, "invalid percent-encoding in path"));
    }
    const http::verb m = req.method();
    const bool get = m == http::verb::get, post = m == http::verb::post;
    auto not_allowed = [&](const char* allowed) {
      return http_routes::NotAllowed(req, path, allowed);
    };
    if (path == "/json")
      return post ? http_routes::Json(engine, req, respond) : respond(not_allowed("POST"));
    if (path == "/v1/check") {
      return get || post ? http_routes::Check(engine, req, query, respond)
                         : respond(not_allowed("GET, POST"));
    }
    if (path == "/v1/report")
      return post ? http_routes::Report(engine, req, respond) : respond(not_allowed("POST"));
    // --- concurrency limits (issue #12): POST only, they change state ---
    if (path == "/v1/acquire")
      return post ? http_routes::Acquire(engine, req, query, respond)
                  : respond(not_allowed("POST"));
    if (path == "/v1/release") {
      return post ? http_routes::PermitCall(engine, req, query, sluice::StoreOp::kRelease, respond)
                  : respond(not_allowed("POST"));
    }
    if (path == "/v1/extend") {
      return post ? http_routes::PermitCall(engine, req, query, sluice::StoreOp::kExtend, respond)
                  : respond(not_allowed("POST"));
    }
    constexpr std::string_view kNginx = "/nginx/auth/";
    if (path.rfind(kNginx, 0) == 0 && path.size() > kNginx.size() &&
        path.find('/', kNginx.size()) == std::string::npos) {
      return get || post ? http_routes::Nginx(engine, req, path.substr(kNginx.size()), respond)
                         : respond(not_allowed("GET, POST"));
    }
    if (path == "/metrics" || path == "/healthz" || path == "/readyz" ||
        (path == "/rlconfig" && o.public_rlconfig)) {
      if (!get) return respond(not_allowed("GET"));
      Reply r;
      r.content_type = "text/plain";
      if (path == "/metrics") {
        r.content_type = "text/plain; version=0.0.4";
        r.body = engine.RenderMetrics();
      } else if (path == "/healthz") {
        r.body = "ok\n";
      } else if (path == "/rlconfig") {
        r.body = engine.DumpConfig();
      } else {
        const bool ok = ready == nullptr || ready->load();
        r.status = ok ? 200 : 503;
        r.body = ok ? "ready\n" : "not ready\n";
      }
      return respond(std::move(r));
    }
    if (path == "/rlconfig") {
      return respond(JsonError(404,
                               "/rlconfig is served on the admin listener (--admin); "
                               "--public-rlconfig serves it on this port too"));
    }
    return respond(
        JsonError(404, "no such endpoint: " + std::string(req.method_string()) + " " + path));
  } catch (const std::exception& e) {
    Log(LogLevel::kError, "internal_error", {{"api", "http"}, {"error", e.what()}});
    return respond(JsonError(500, "internal error"));
  }
}

HttpServer::HttpServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() {
  Stop();
}
int HttpServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Engine& engine, const std::string& addr,
                                                      const HttpOptions& options,
                                                      const std::atomic<bool>* ready) {
  return Start(engine, addr, options, ready, nullptr);
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Engine& engine, const std::string& addr,
                                                      const HttpOptions& options,
                                                      const std::atomic<bool>* ready,
                                                      HttpRouter router) {
  HttpOptions o = options;
  if (o.io_threads == 0) o.io_threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.backlog <= 0) o.backlog = SOMAXCONN;
  if (o.max_connections == 0) o.max_connections = 1;
  auto impl = std::make_shared<Impl>(engine, ready, o);
  impl->router = std::move(router);

  const std::size_t colon = addr.rfind(':');
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int want = std::atoi(addr.c_str() + colon + 1);
  beast::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("HTTP listen address " + addr + ": not an IP address");
  const tcp::endpoint ep(ip, static_cast<unsigned short>(want));
  impl->acceptor.emplace(*impl->ctxs[0]);
  tcp::acceptor& a = *impl->acceptor;
  auto fail = [&](const char* what) {
    return Status::Unavailable("cannot listen for HTTP on " + addr + ": " + what + ": " +
                               ec.message());
  };
  a.open(ep.protocol(), ec);
  if (ec) return fail("socket");
  // SO_REUSEADDR only lets a restart bind past TIME_WAIT; it never shares a listening port.
  a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (o.reuse_port) {
    const int one = 1;
    ::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  }
  a.bind(ep, ec);
  if (ec) return fail("bind");
  a.listen(o.backlog, ec);
  if (ec) return fail("listen");
  impl->port = a.local_endpoint(ec).port();
  impl->accept_retry.emplace(*impl->ctxs[0]);
  impl->sweeper.emplace(*impl->ctxs[0]);
  impl->Sweep();
  impl->Accept();
  for (std::size_t i = 0; i < o.io_threads; ++i) {
    impl->threads.emplace_back([ctx = impl->ctxs[i].get()] {
      // Keeps run() going while the context has no work yet.
      auto guard = asio::make_work_guard(*ctx);
      ctx->run();
    });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.stopping.store(true);
  asio::post(*s.ctxs[0], [p = &s] {
    beast::error_code ec;
    p->acceptor->close(ec);
    p->accept_retry->cancel();
    p->sweeper->cancel();
  });
  {
    std::vector<std::shared_ptr<Conn>> live;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (Conn* c : s.conns) {
        if (auto sp = c->weak_from_this().lock()) live.push_back(std::move(sp));
      }
    }
    for (auto& c : live) c->Interrupt();
  }
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.all_closed.wait_for(lock, std::chrono::seconds(5), [&] { return s.open.load() == 0; });
  }
  for (auto& c : s.ctxs) c->stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

}  // namespace sluice::service
