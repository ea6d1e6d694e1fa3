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

#include "service/json_api.h"
#include "service/log.h"

namespace sluice::service {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes; '+' is a space in a query (HTML forms), not in a path.
bool PercentDecode(std::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexValue(in[i + 1]);
      const int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out->push_back(' ');
    } else {
      out->push_back(c);
    }
  }
  return true;
}

// Never throws: bytes that are not UTF-8 (user input echoed in errors) are replaced.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// What a handler answers; turned into a Beast response by the connection.
struct Reply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this answer
};

Reply JsonError(int status, const std::string& why) {
  Reply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = Dump(nlohmann::json{{"error", why}});
  return r;
}

void AddRateLimitHeaders(Reply& r, const RateLimitResponse& out) {
  for (const auto& [k, v] : out.response_headers) {
    // Canonical capitalisation for clients and nginx's $upstream_http_* alike.
    if (k == "x-ratelimit-limit") {
      r.headers.emplace_back("X-RateLimit-Limit", v);
    } else if (k == "x-ratelimit-remaining") {
      r.headers.emplace_back("X-RateLimit-Remaining", v);
    } else if (k == "x-ratelimit-reset") {
      r.headers.emplace_back("X-RateLimit-Reset", v);
    } else if (k == "retry-after") {
      r.headers.emplace_back("Retry-After", v);
    } else {
      r.headers.emplace_back(k, v);
    }
  }
}

using Request = http::request<http::string_body>;
using Params = std::vector<std::pair<std::string, std::string>>;

const std::string* FirstParam(const Params& p, std::string_view name) {
  for (const auto& [k, v] : p) {
    if (k == name) return &v;
  }
  return nullptr;
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> ParseQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const std::size_t eq = part.find('=');
    const std::string_view name = part.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    std::pair<std::string, std::string> p;
    if (!PercentDecode(name, true, &p.first) || !PercentDecode(value, true, &p.second)) {
      return Status::InvalidArgument("invalid percent-encoding in query parameter '" +
                                     std::string(part) + "' (use %XX with two hex digits)");
    }
    out.push_back(std::move(p));
  }
  return out;
}

class Conn;

struct HttpServer::Impl {
  Engine& engine;
  const std::atomic<bool>* ready;
  HttpOptions o;
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
  using Respond = std::function<void(Reply)>;
  void Handle(const Request& req, Respond respond);
  void Json(const Request& req, Respond respond);
  void Check(const Request& req, std::string_view query, Respond respond);
  void Nginx(const Request& req, const std::string& domain, Respond respond);
  // --- concurrency limits (issue #12) ---
  void Acquire(const Request& req, std::string_view query, Respond respond);
  void PermitCall(const Request& req, std::string_view query, sluice::StoreOp op, Respond respond);
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
      return Fail(431, "request header section is larger than max_header_bytes (" +
                           std::to_string(s_->o.max_header_bytes) + ")");
    }
    if (ec == http::error::body_limit) return BodyTooLarge();  // Content-Length too big
    if (ec == http::error::buffer_overflow) {
      return Fail(431, "request header section is too large");
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

  void BodyTooLarge() {
    Fail(413, "request body is larger than max_body_bytes (" +
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
    s_->Handle(req_, [self = shared_from_this()](Reply r) {
      if (self->handling_.load() == std::this_thread::get_id()) {
        self->inline_reply_ = std::move(r);
        self->have_inline_ = true;
        return;
      }
      asio::post(self->socket_.get_executor(),
                 [self, r = std::move(r)]() mutable { self->Write(std::move(r)); });
    });
    handling_.store(std::thread::id());
    if (have_inline_) Write(std::move(inline_reply_));
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
    const std::string_view target(req.target().data(), req.target().size());
    const std::size_t q = target.find('?');
    std::string path;
    if (!PercentDecode(target.substr(0, q), false, &path)) {
      return respond(JsonError(400, "invalid percent-encoding in path"));
    }
    const std::string_view query =
        q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    const http::verb m = req.method();
    const bool get = m == http::verb::get, post = m == http::verb::post;
    auto not_allowed = [&](const char* allowed) {
      Reply r = JsonError(405, "method " + std::string(req.method_string()) + " not allowed on " +
                                   path + " (use " + allowed + ")");
      r.headers.emplace_back("Allow", allowed);
      return r;
    };
    if (path == "/json") return post ? Json(req, respond) : respond(not_allowed("POST"));
    if (path == "/v1/check") {
      return get || post ? Check(req, query, respond) : respond(not_allowed("GET, POST"));
    }
    // --- concurrency limits (issue #12): POST only, they change state ---
    if (path == "/v1/acquire")
      return post ? Acquire(req, query, respond) : respond(not_allowed("POST"));
    if (path == "/v1/release") {
      return post ? PermitCall(req, query, sluice::StoreOp::kRelease, respond)
                  : respond(not_allowed("POST"));
    }
    if (path == "/v1/extend") {
      return post ? PermitCall(req, query, sluice::StoreOp::kExtend, respond)
                  : respond(not_allowed("POST"));
    }
    constexpr std::string_view kNginx = "/nginx/auth/";
    if (path.rfind(kNginx, 0) == 0 && path.size() > kNginx.size() &&
        path.find('/', kNginx.size()) == std::string::npos) {
      return get || post ? Nginx(req, path.substr(kNginx.size()), respond)
                         : respond(not_allowed("GET, POST"));
    }
    if (path == "/metrics" || path == "/healthz" || path == "/readyz" || path == "/rlconfig") {
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
    return respond(
        JsonError(404, "no such endpoint: " + std::string(req.method_string()) + " " + path));
  } catch (const std::exception& e) {
    Log(LogLevel::kError, "internal_error", {{"api", "http"}, {"error", e.what()}});
    return respond(JsonError(500, "internal error"));
  }
}

void HttpServer::Impl::Json(const Request& req, Respond respond) {
  auto fail = [this, &respond](const Status& s) {
    const bool invalid = s.code() == ErrorCode::kInvalidArgument;
    engine.metrics().CountRequest(Api::kJson,
                                  invalid ? RequestOutcome::kInvalid : RequestOutcome::kError);
    Log(LogLevel::kWarn, "bad_request", {{"api", "json"}, {"error", s.message()}});
    respond(JsonError(invalid ? 400 : 500, s.message()));
  };
  JsonRequest parsed;
  if (Status s = ParseJsonRequest(req.body(), engine.settings_ptr()->max_descriptors, &parsed);
      !s.ok()) {
    return fail(s);
  }
  engine.ShouldRateLimitAsync(
      parsed.request, [this, respond, fail](const Status& s, RateLimitResponse& out) mutable {
        if (!s.ok()) return fail(s);
        const bool over = out.overall_code == Code::kOverLimit;
        engine.metrics().CountRequest(Api::kJson,
                                      over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
        Reply r;
        r.status = over ? 429 : 200;
        r.content_type = "application/json";
        r.body = RenderJsonResponse(out);
        respond(std::move(r));
      });
}

// /v1/check?domain=D&key=K&value=V[&key=K2&value=V2...][&hits=N]: one descriptor whose
// entries are the key/value pairs in order (repeated keys kept). A POST may carry the
// same parameters as an application/x-www-form-urlencoded body. 200 allowed, 429 over.
// The query parameters of `req`, and those of an application/x-www-form-urlencoded POST
// body after them.
static Result<Params> RequestParams(const Request& req, std::string_view query) {
  auto params = ParseQuery(query);
  if (!params.ok()) return params.status();
  if (req.method() == http::verb::post &&
      beast::iequals(req[http::field::content_type].substr(0, 33),
                     "application/x-www-form-urlencoded")) {
    auto form = ParseQuery(req.body());
    if (!form.ok()) return form.status();
    params->insert(params->end(), form->begin(), form->end());
  }
  return params;
}

// /v1/check's (and /v1/acquire's) one descriptor from `params` (which `r` views).
// InvalidArgument with the reason.
static Status DescriptorFromParams(const Params& params, RateLimitRequest* r) {
  const std::string* domain = FirstParam(params, "domain");
  if (domain == nullptr || domain->empty()) {
    return Status::InvalidArgument("missing query parameter 'domain'");
  }
  std::vector<const std::string*> keys, values;
  for (const auto& [k, v] : params) {
    if (k == "key") keys.push_back(&v);
    if (k == "value") values.push_back(&v);
  }
  if (keys.empty() || keys.size() != values.size()) {
    return Status::InvalidArgument("give one or more key=K&value=V pairs (got " +
                                   std::to_string(keys.size()) + " key and " +
                                   std::to_string(values.size()) + " value parameters)");
  }
  r->domain = *domain;
  r->descriptors.resize(1);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    r->descriptors[0].entries.push_back(Entry{*keys[i], *values[i]});
  }
  if (const std::string* h = FirstParam(params, "hits")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(h->c_str(), &end, 10);
    if (h->empty() || *end != '\0' || (*h)[0] == '-' || v > 0xffffffffULL) {
      return Status::InvalidArgument("hits must be an integer in 0..4294967295 (got '" + *h + "')");
    }
    // The descriptor's own cost, so that hits=0 peeks (a request-level 0 would mean 1).
    r->descriptors[0].has_hits_addend = true;
    r->descriptors[0].hits_addend = v;
  }
  return Status::Ok();
}

void HttpServer::Impl::Check(const Request& req, std::string_view query, Respond respond) {
  auto invalid = [this, respond](const std::string& why) {
    engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
    respond(JsonError(400, why));
  };
  auto params = RequestParams(req, query);
  if (!params.ok()) return invalid(params.status().message());
  RateLimitRequest r;
  if (Status st = DescriptorFromParams(*params, &r); !st.ok()) return invalid(st.message());
  engine.ShouldRateLimitAsync(r, [this, respond, invalid](const Status& s, RateLimitResponse& out) {
    if (!s.ok()) return invalid(s.message());
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kCheck,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    Reply rep;
    AddRateLimitHeaders(rep, out);
    rep.status = over ? 429 : 200;
    rep.content_type = "application/json";
    rep.body = RenderCheckResponse(out);
    respond(std::move(rep));
  });
}

// nginx auth_request: descriptors from the headers named in settings.nginx_headers.
// 200 allowed; 403 over limit (auth_request passes only 2xx, 401 and 403; the nginx
// config turns 403 into 429 with error_page). Rate-limit headers on both.
void HttpServer::Impl::Nginx(const Request& req, const std::string& domain, Respond respond) {
  const std::shared_ptr<const Settings> settings = engine.settings_ptr();
  RateLimitRequest r;
  r.domain = domain;
  for (const auto& [header, key] : settings->nginx_headers) {
    const auto it = req.find(header);
    if (it == req.end() || it->value().empty()) continue;
    r.descriptors.push_back(DescriptorRequest{});
    r.descriptors.back().entries.push_back(
        Entry{key, std::string_view(it->value().data(), it->value().size())});
  }
  if (r.descriptors.empty()) {
    // Nothing identifies the caller: nothing to limit.
    engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kOk);
    return respond(Reply{});
  }
  engine.ShouldRateLimitAsync(r, [this, respond, domain](const Status& s, RateLimitResponse& out) {
    if (!s.ok()) {
      engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kInvalid);
      Log(LogLevel::kWarn, "bad_request",
          {{"api", "nginx"}, {"domain", domain}, {"error", s.message()}});
      return respond(JsonError(400, s.message()));
    }
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kNginx,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    Reply rep;
    AddRateLimitHeaders(rep, out);
    rep.status = over ? 403 : 200;
    respond(std::move(rep));
  });
}

// --- concurrency limits (issue #12) ---------------------------------------------

// POST /v1/acquire: /v1/check's parameters; takes a permit from every concurrency limit
// the descriptor matches (and its rate limits), atomically. 200 with the permit token,
// 429 with Retry-After (until the earliest held permit expires) when none is free.
void HttpServer::Impl::Acquire(const Request& req, std::string_view query, Respond respond) {
  auto invalid = [this, respond](const std::string& why) {
    engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kInvalid);
    respond(JsonError(400, why));
  };
  auto params = RequestParams(req, query);
  if (!params.ok()) return invalid(params.status().message());
  RateLimitRequest r;
  if (Status st = DescriptorFromParams(*params, &r); !st.ok()) return invalid(st.message());
  engine.AcquireAsync(r, [this, respond, invalid](const Status& s, PermitResponse& out) {
    if (!s.ok()) return invalid(s.message());
    const bool over = out.rate.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kPermit,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    Reply rep;
    AddRateLimitHeaders(rep, out.rate);
    rep.status = over ? 429 : 200;
    rep.content_type = "application/json";
    rep.body = RenderAcquireResponse(out);
    respond(std::move(rep));
  });
}

// POST /v1/release, /v1/extend: `permit=TOKEN` (query or form body). 200; 404 when the
// permit is not held (unknown, released already, expired); 400 for a missing or
// malformed token.
void HttpServer::Impl::PermitCall(const Request& req, std::string_view query, sluice::StoreOp op,
                                  Respond respond) {
  auto fail = [this, respond](int status, const std::string& why) {
    engine.metrics().CountRequest(
        Api::kPermit, status == 400 ? RequestOutcome::kInvalid : RequestOutcome::kError);
    respond(JsonError(status, why));
  };
  auto params = RequestParams(req, query);
  if (!params.ok()) return fail(400, params.status().message());
  const std::string* token = FirstParam(*params, "permit");
  if (token == nullptr || token->empty()) {
    return fail(400, "missing parameter 'permit' (the token /v1/acquire returned)");
  }
  engine.PermitAsync(op, *token, [this, respond, fail, op](const Status& s, PermitResponse& out) {
    if (!s.ok()) {
      const int status = s.code() == ErrorCode::kInvalidArgument ? 400
                         : s.code() == ErrorCode::kNotFound      ? 404
                                                                 : 503;
      if (status == 404) {
        engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kInvalid);
        return respond(JsonError(404, s.message()));
      }
      return fail(status, s.message());
    }
    engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kOk);
    Reply rep;
    rep.content_type = "application/json";
    if (op == sluice::StoreOp::kExtend) {
      rep.body = Dump(nlohmann::json{{"extended", true}, {"lease_ms", (out.lease + 999) / 1000}});
    } else {
      rep.body = Dump(nlohmann::json{{"released", true}});
    }
    respond(std::move(rep));
  });
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
  HttpOptions o = options;
  if (o.io_threads == 0) o.io_threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.backlog <= 0) o.backlog = SOMAXCONN;
  if (o.max_connections == 0) o.max_connections = 1;
  auto impl = std::make_shared<Impl>(engine, ready, o);

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
