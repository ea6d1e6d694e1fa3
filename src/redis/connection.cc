#include "redis/connection.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::redis {
namespace {

timeval ToTimeval(Micros us) {
  if (us < 1) us = 1;
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

Micros MicrosUntil(Deadline d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d - SteadyClock::now()).count();
}

void AppendLength(std::string& out, char kind, std::size_t n) {
  out.push_back(kind);
  out.append(std::to_string(n));
  out.append("\r\n");
}

// Explains a failed blocking hiredis call.
Status ContextError(const redisContext* c, const Url& url, const char* step, Micros timeout) {
  const std::string where = url.Describe();
  switch (c->err) {
    case REDIS_ERR_PROTOCOL:
      return Status::Unavailable(where + " did not answer like a Redis server (" + step +
                                 "): " + c->errstr);
    case REDIS_ERR_EOF:
      return Status::Unavailable(where + " closed the connection during " + step +
                                 " (is it a Redis server?)");
    case REDIS_ERR_IO:
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
          std::strstr(c->errstr, "temporarily unavailable") != nullptr) {
        return Status::Unavailable(where + " did not answer " + step + " within " +
                                   std::to_string(timeout / 1000) + " ms");
      }
      [[fallthrough]];
    default:
      return Status::Unavailable(where + ": " + step + " failed: " + c->errstr);
  }
}

// hiredis writes with write(): a peer that closed the socket would raise SIGPIPE and
// kill the process. While this guard lives, SIGPIPE is blocked in this thread (write
// then fails with EPIPE); one that we raised is discarded before unblocking.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (sigismember(&old_, SIGPIPE)) return;  // the caller blocks it anyway
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

}  // namespace

Reply Reply::From(const redisReply& r) {
  Reply out;
  out.type = r.type;
  out.integer = r.integer;
  if (r.str != nullptr) out.str.assign(r.str, r.len);
  out.elements.reserve(r.elements);
  for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(From(*r.element[i]));
  return out;
}

CommandBuilder::CommandBuilder(std::size_t argc) {
  AppendLength(wire_, '*', argc);
}

CommandBuilder& CommandBuilder::Add(std::string_view arg) {
  AppendLength(wire_, '$', arg.size());
  wire_.append(arg);
  wire_.append("\r\n");
  return *this;
}

CommandBuilder& CommandBuilder::Add(long long v) {
  char buf[24];
  const int n = std::snprintf(buf, sizeof(buf), "%lld", v);
  return Add(std::string_view(buf, static_cast<std::size_t>(n)));
}

std::string EncodeCommand(std::initializer_list<std::string_view> args) {
  CommandBuilder b(args.size());
  for (std::string_view a : args) b.Add(a);
  return b.Take();
}

Result<ContextPtr> Handshake(const ConnectOptions& o) {
  SigpipeGuard no_sigpipe;
  const Url& u = o.url;
  const Deadline deadline = DeadlineAfter(o.connect_timeout);
  const timeval tv = ToTimeval(o.connect_timeout);
  ContextPtr c(u.unix_socket ? redisConnectUnixWithTimeout(u.path.c_str(), tv)
                             : redisConnectWithTimeout(u.host.c_str(), u.port, tv));
  if (!c) return Status::Unavailable("out of memory connecting to " + u.Describe());
  if (c->err) {
    return Status::Unavailable("cannot connect to " + u.Describe() + ": " + c->errstr);
  }
  // Each step may use what is left of the connect timeout.
  auto command = [&](const char* step, std::initializer_list<std::string_view> args,
                     ReplyPtr* out) -> Status {
    const Micros left = MicrosUntil(deadline);
    if (left <= 0) {
      return Status::Unavailable(u.Describe() + " did not complete the handshake within " +
                                 std::to_string(o.connect_timeout / 1000) + " ms");
    }
    redisSetTimeout(c.get(), ToTimeval(left));
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    errno = 0;
    void* r = redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data());
    if (r == nullptr) return ContextError(c.get(), u, step, o.connect_timeout);
    out->reset(static_cast<redisReply*>(r));
    return Status::Ok();
  };
  auto error_text = [](const ReplyPtr& r) { return std::string(r->str, r->len); };

  ReplyPtr r;
  if (!u.password.empty()) {
    Status s = u.user.empty() ? command("AUTH", {"AUTH", u.password}, &r)
                              : command("AUTH", {"AUTH", u.user, u.password}, &r);
    if (!s.ok()) return s;
    if (r->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("authentication to " + u.Describe() +
                                     " failed: " + error_text(r));
    }
  }
  if (Status s = command("PING", {"PING"}, &r); !s.ok()) return s;
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string e = error_text(r);
    if (e.starts_with("NOAUTH")) {
      return Status::InvalidArgument(u.Describe() +
                                     " requires a password: give it in the URL, "
                                     "redis://[user:]password@host:port");
    }
    return Status::Unavailable(u.Describe() + " refused PING: " + e);
  }
  if (r->type != REDIS_REPLY_STATUS || std::string_view(r->str, r->len) != "PONG") {
    return Status::Unavailable(u.Describe() + " did not answer PING like a Redis server");
  }
  if (u.db != 0) {
    const std::string db = std::to_string(u.db);
    if (Status s = command("SELECT", {"SELECT", db}, &r); !s.ok()) return s;
    if (r->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("cannot select database " + db + " on " + u.Describe() + ": " +
                                     error_text(r));
    }
  }
  for (const std::string& script : o.scripts) {
    if (Status s = command("SCRIPT LOAD", {"SCRIPT", "LOAD", script}, &r); !s.ok()) return s;
    if (r->type == REDIS_REPLY_ERROR) {
      return Status::Unavailable("SCRIPT LOAD on " + u.Describe() + " failed: " + error_text(r));
    }
  }
  // From here on the I/O thread drives the socket itself, without blocking.
  const int flags = fcntl(c->fd, F_GETFL, 0);
  if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status::Unavailable("cannot make the socket to " + u.Describe() + " non-blocking");
  }
  if (!u.unix_socket) {
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return c;
}

Result<std::unique_ptr<Connection>> Connection::Open(const ConnectOptions& options,
                                                     std::shared_ptr<ConnectionStats> stats) {
  auto ctx = Handshake(options);
  if (!ctx.ok()) return ctx.status();
  std::unique_ptr<Connection> c(new Connection(options, std::move(stats), std::move(*ctx)));
  if (c->wake_fd_ < 0) return Status::Internal("eventfd failed: " + std::string(strerror(errno)));
  c->connected_.store(true, std::memory_order_release);
  c->thread_ = std::thread([p = c.get()] { p->Run(); });
  return c;
}

Connection::Connection(ConnectOptions options, std::shared_ptr<ConnectionStats> stats,
                       ContextPtr ctx)
    : options_(std::move(options)), stats_(std::move(stats)), ctx_(std::move(ctx)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Connection::~Connection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
  // Anything queued after the thread stopped.
  std::vector<Queued> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
  }
  const Status s = Status::Unavailable("the Redis client is shutting down");
  for (Queued& q : left) {
    for (ReplyCallback& cb : q.callbacks) cb(s, nullptr);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string Connection::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void Connection::Wake() {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void Connection::Submit(std::string wire, Deadline deadline, ReplyCallback callback) {
  std::vector<ReplyCallback> cbs;
  cbs.push_back(std::move(callback));
  Submit(std::move(wire), deadline, std::move(cbs));
}

void Connection::Submit(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks) {
  bool wake = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_ || !connected_.load(std::memory_order_relaxed)) {
      const std::string why = stop_ ? "the Redis client is shutting down"
                                    : "not connected to " + options_.url.Describe() +
                                          (last_error_.empty() ? "" : ": " + last_error_);
      lock.unlock();
      const Status s = Status::Unavailable(why);
      for (ReplyCallback& cb : callbacks) cb(s, nullptr);
      return;
    }
    queue_.push_back(Queued{std::move(wire), deadline, std::move(callbacks)});
    if (!wake_pending_) wake = wake_pending_ = true;
  }
  if (wake) Wake();
}

void Connection::FailAll(std::deque<Pending>& inflight, const Status& s) {
  for (Pending& p : inflight) {
    if (!p.done) p.callback(s, nullptr);
  }
  inflight.clear();
}

void Connection::Run() {
  Micros backoff = 0;  // the first reconnect is immediate (e.g. after CLIENT KILL)
  for (;;) {
    if (ctx_) {
      std::string why = Serve();
      ctx_.reset();
      if (why.empty()) return;  // stopped
      stats_->disconnects.fetch_add(1, std::memory_order_relaxed);
      backoff = 0;
      continue;
    }
    // Disconnected: wait (interruptibly), then try again.
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::microseconds(backoff), [&] { return stop_; })) return;
    }
    auto ctx = Handshake(options_);
    if (ctx.ok()) {
      ctx_ = std::move(*ctx);
      stats_->reconnects.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu_);
      connected_.store(true, std::memory_order_release);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = ctx.status().message();
    }
    backoff = std::clamp<Micros>(backoff * 2, 10'000, 1'000'000);
  }
}

std::string Connection::Serve() {
  const int fd = ctx_->fd;
  ReaderPtr reader(redisReaderCreate());
  std::deque<Pending> inflight;
  std::string out;  // bytes not yet written
  std::size_t out_off = 0;
  std::vector<Queued> batch;
  char buf[16384];
  std::string broken;

  while (broken.empty()) {
    // 1. Take what callers queued; expired commands are not sent at all.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      batch.swap(queue_);
      wake_pending_ = false;
    }
    Deadline now = SteadyClock::now();
    for (Queued& q : batch) {
      if (q.deadline <= now) {
        stats_->timeouts.fetch_add(q.callbacks.size(), std::memory_order_relaxed);
        const Status s = Status::DeadlineExceeded("Redis call timed out before it was sent");
        for (ReplyCallback& cb : q.callbacks) cb(s, nullptr);
        continue;
      }
      out.append(q.wire);
      for (ReplyCallback& cb : q.callbacks) inflight.push_back(Pending{q.deadline, std::move(cb)});
    }
    batch.clear();

    // 2. Write as much as the socket takes.
    while (out_off < out.size()) {
      const ssize_t n = send(fd, out.data() + out_off, out.size() - out_off, MSG_NOSIGNAL);
      if (n > 0) {
        out_off += static_cast<std::size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        broken = std::string("write failed: ") + strerror(errno);
        break;
      }
    }
    if (!broken.empty()) break;
    if (out_off == out.size()) {
      out.clear();
      out_off = 0;
    } else if (out_off > (1 << 20)) {
      out.erase(0, out_off);
      out_off = 0;
    }

    // 3. Sleep until the socket is ready, a caller wakes us, or the next deadline.
    Deadline next = now + std::chrono::seconds(1);
    for (const Pending& p : inflight) {
      if (!p.done) next = std::min(next, p.deadline);
    }
    if (!inflight.empty()) {
      next = std::min(
          next, inflight.front().deadline + std::chrono::microseconds(options_.stall_timeout));
    }
    Micros wait = std::max<Micros>(0, MicrosUntil(next));
    timespec ts{static_cast<time_t>(wait / 1'000'000),
                static_cast<long>((wait % 1'000'000) * 1000)};
    pollfd fds[2] = {{fd, static_cast<short>(POLLIN | (out.empty() ? 0 : POLLOUT)), 0},
                     {wake_fd_, POLLIN, 0}};
    const int rc = ppoll(fds, 2, &ts, nullptr);
    if (rc < 0 && errno != EINTR) {
      broken = std::string("poll failed: ") + strerror(errno);
      break;
    }
    if (rc > 0 && (fds[1].revents & POLLIN)) {
      std::uint64_t v;
      [[maybe_unused]] ssize_t n = read(wake_fd_, &v, sizeof(v));
    }

    // 4. Read and dispatch replies in order.
    if (rc > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
          if (redisReaderFeed(reader.get(), buf, static_cast<std::size_t>(n)) != REDIS_OK) {
            broken = "protocol error";
            break;
          }
          if (static_cast<std::size_t>(n) < sizeof(buf)) break;
          continue;
        }
        if (n == 0) {
          broken = "the server closed the connection";
        } else if (errno == EINTR) {
          continue;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          broken = std::string("read failed: ") + strerror(errno);
        }
        break;
      }
      for (;;) {
        void* r = nullptr;
        if (redisReaderGetReply(reader.get(), &r) != REDIS_OK) {
          broken = std::string("protocol error: ") + reader->errstr;
          break;
        }
        if (r == nullptr) break;
        ReplyPtr reply(static_cast<redisReply*>(r));
        if (inflight.empty()) {
          broken = "unexpected reply from the server";
          break;
        }
        Pending p = std::move(inflight.front());
        inflight.pop_front();
        if (!p.done) p.callback(Status::Ok(), reply.get());
      }
    }

    // 5. Time out overdue callers; declare the connection broken if it stalls.
    now = SteadyClock::now();
    for (Pending& p : inflight) {
      if (!p.done && p.deadline <= now) {
        p.done = true;
        stats_->timeouts.fetch_add(1, std::memory_order_relaxed);
        p.callback(Status::DeadlineExceeded("Redis did not answer before the deadline"), nullptr);
        p.callback = nullptr;
      }
    }
    if (broken.empty() && !inflight.empty() &&
        inflight.front().deadline + std::chrono::microseconds(options_.stall_timeout) <= now) {
      broken = "no reply for " + std::to_string(options_.stall_timeout / 1000) +
               " ms past a deadline (server stalled?)";
    }
  }

  // Stopped or broken: nothing is queued for later.
  std::vector<Queued> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_.store(false, std::memory_order_release);
    left.swap(queue_);
    if (!broken.empty()) last_error_ = broken;
  }
  const Status s =
      broken.empty() ? Status::Unavailable("the Redis client is shutting down")
                     : Status::Unavailable("connection to " + options_.url.Describe() + " lost (" +
                                           broken + "); a command in flight may have run");
  FailAll(inflight, s);
  for (Queued& q : left) {
    for (ReplyCallback& cb : q.callbacks) cb(s, nullptr);
  }
  return broken;
}

Result<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  const int n = std::max(1, options.connections);
  std::unique_ptr<Client> c(new Client(std::move(options)));
  for (int i = 0; i < n; ++i) {
    auto conn = Connection::Open(c->options_.connect, c->stats_);
    if (!conn.ok()) return conn.status();
    c->conns_.push_back(std::move(*conn));
  }
  return c;
}

Connection& Client::Pick() {
  const std::size_t n = conns_.size();
  const std::size_t start = next_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t k = 0; k < n; ++k) {
    Connection& c = *conns_[(start + k) % n];
    if (c.connected()) return c;
  }
  return *conns_[start % n];  // all down: it fails the call at once
}

void Client::CallAsync(std::string wire, Deadline deadline, ReplyCallback callback) {
  Pick().Submit(std::move(wire), deadline, std::move(callback));
}

void Client::CallAsync(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks) {
  Pick().Submit(std::move(wire), deadline, std::move(callbacks));
}

Result<Reply> Client::Call(std::string wire, Deadline deadline) {
  struct Out {
    Status status;
    Reply reply;
  };
  auto w = std::make_shared<Waiter<Out>>();
  CallAsync(std::move(wire), deadline, [w](const Status& s, const redisReply* r) {
    w->Complete([&](Out& o) {
      o.status = s;
      if (r != nullptr) o.reply = Reply::From(*r);
    });
  });
  if (!w->Wait(deadline))
    return Status::DeadlineExceeded("Redis did not answer before the deadline");
  if (!w->value().status.ok()) return w->value().status;
  return std::move(w->value().reply);
}

}  // namespace sluice::redis
