#include "redis/connection.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "redis/client_thread.h"

namespace sluice::redis {

Result<std::unique_ptr<Connection>> Connection::Open(const ConnectOptions& options,
                                                     std::shared_ptr<ConnectionStats> stats,
                                                     std::shared_ptr<CompletionQueue> completions) {
  HandshakeInfo info;
  auto t = ConnectAndHandshake(options.handshake, -1, &info);
  if (!t.ok()) return t.status();
  std::unique_ptr<Connection> c(
      new Connection(options, std::move(stats), std::move(completions), std::move(*t)));
  if (c->wake_fd_ < 0 || c->stop_fd_ < 0) {
    return Status::Internal("eventfd failed: " + std::string(strerror(errno)));
  }
  c->module_.store(info.module, std::memory_order_release);
  c->connected_.store(true, std::memory_order_release);
  c->ever_connected_ = true;
  c->thread_ = StartClientThread([p = c.get()] { p->Run(); });
  return c;
}

std::unique_ptr<Connection> Connection::Start(const ConnectOptions& options,
                                              std::shared_ptr<ConnectionStats> stats,
                                              std::shared_ptr<CompletionQueue> completions) {
  std::unique_ptr<Connection> c(
      new Connection(options, std::move(stats), std::move(completions), nullptr));
  c->last_error_ = "connecting in the background";
  c->thread_ = StartClientThread([p = c.get()] { p->Run(); });
  return c;
}

Connection::Connection(ConnectOptions options, std::shared_ptr<ConnectionStats> stats,
                       std::shared_ptr<CompletionQueue> completions,
                       std::unique_ptr<Transport> transport)
    : options_(std::move(options)),
      stats_(std::move(stats)),
      completions_(std::move(completions)),
      transport_(std::move(transport)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Connection::~Connection() {
  Shutdown();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void Connection::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  Wake();
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
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

void Connection::Submit(std::string wire, Deadline deadline, ReplyCallback callback,
                        CoalesceInfo coalesce, std::string module_wire) {
  std::vector<ReplyCallback> cbs;
  cbs.push_back(std::move(callback));
  bool wake = false, queued = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stop_ && connected_.load(std::memory_order_relaxed)) {
      queue_.push_back(Queued{std::move(wire), deadline, std::move(cbs), std::move(coalesce),
                              std::move(module_wire)});
      queued = true;
      if (!wake_pending_) wake = wake_pending_ = true;
    }
  }
  if (!queued) {  // fails it as any other command
    Submit(std::move(wire), deadline, std::move(cbs));
    return;
  }
  if (wake) Wake();
}

bool IsRefusedCommand(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ERROR) return false;
  const std::string_view e(r->str, r->len);
  // (Redis 7: "NOPERM this user has no permissions to run the 'x' command"; Valkey 8:
  // "NOPERM User u has no permissions to run the 'x' command". A key the user may not
  // touch is another NOPERM, which the script would get too.)
  return e.starts_with("ERR unknown command") ||
         (e.starts_with("NOPERM") && e.find("permissions to run the") != std::string_view::npos);
}

void Connection::Submit(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks) {
  bool wake = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_ || !connected_.load(std::memory_order_relaxed)) {
      const std::string why = stop_ ? "the Redis client is shutting down"
                                    : "not connected to " + options_.url().Describe() +
                                          (last_error_.empty() ? "" : ": " + last_error_);
      lock.unlock();
      // Never inline: see "Where callbacks run" in connection.h.
      completions_->Fail(std::move(callbacks), Status::Unavailable(why));
      return;
    }
    queue_.push_back(Queued{std::move(wire), deadline, std::move(callbacks)});
    if (!wake_pending_) wake = wake_pending_ = true;
  }
  if (wake) Wake();
}

void Connection::Run() {
  BlockSigpipeInThisThread();  // TLS writes with write(): EPIPE instead of a signal
  // Reconnects skip the scripts: the server keeps them, and NOSCRIPT reloads them.
  HandshakeOptions reconnect = options_.handshake;
  reconnect.scripts.clear();
  Micros backoff = 0;  // the first reconnect is immediate (e.g. after CLIENT KILL)
  for (;;) {
    if (transport_) {
      std::string why = Serve();
      transport_.reset();
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
    HandshakeInfo info;
    auto t = ConnectAndHandshake(reconnect, stop_fd_, &info);
    if (t.ok()) {
      transport_ = std::move(*t);
      module_.store(info.module, std::memory_order_release);
      if (ever_connected_) stats_->reconnects.fetch_add(1, std::memory_order_relaxed);
      ever_connected_ = true;
      std::lock_guard<std::mutex> lock(mu_);
      connected_.store(true, std::memory_order_release);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = t.status().message();
    }
    backoff = std::clamp<Micros>(backoff * 2, 10'000, 1'000'000);
  }
}

// The I/O thread's state while one transport is up: Serve and its steps.
struct Connection::Session {
  Transport& t;
  ReaderPtr reader = NewReader();
  std::deque<Pending> inflight;
  std::string out;  // bytes not yet written
  std::size_t out_off = 0;
  std::vector<Queued> batch;
  // Mergeable calls held back while one of theirs is in flight (Hold).
  std::vector<Queued> held;
  std::string broken;           // why the connection broke (empty: it did not)
  std::size_t reply_bytes = 0;  // bytes received since the last complete reply
  char buf[16384];
};

std::string Connection::Serve() {
  Session s{*transport_};
  while (s.broken.empty()) {
    // 1. Take what callers queued; expired commands are not sent at all.
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      s.batch.swap(queue_);
      wake_pending_ = false;
    }
    const Deadline now = SteadyClock::now();
    ExpireUnsent(s.held, now);
    ExpireUnsent(s.batch, now);
    Hold(s.held, s.batch, s.inflight);
    Emit(s.batch, s.out, s.inflight);
    s.batch.clear();
    // 2. Write as much as the transport takes.
    if (!Flush(s)) break;
    // 3. Sleep until the socket is ready, a caller wakes us, or the next deadline.
    const bool readable = AwaitReadable(s, now);
    if (!s.broken.empty()) break;
    // 4. Read and dispatch replies in order.
    if (readable) ReadReplies(s);
    // 5. Time out overdue callers; declare the connection broken if it stalls.
    ExpireOverdue(s);
  }
  FailEverything(s);
  return s.broken;
}

void Connection::ExpireUnsent(std::vector<Queued>& queued, Deadline now) {
  for (Queued& q : queued) {
    if (q.deadline <= now) {
      stats_->timeouts.fetch_add(q.callbacks.size(), std::memory_order_relaxed);
      const Status st = Status::DeadlineExceeded("Redis call timed out before it was sent");
      for (ReplyCallback& cb : q.callbacks) cb(st, nullptr);
    }
  }
  std::erase_if(queued, [now](const Queued& q) { return q.deadline <= now; });
}

bool Connection::Flush(Session& s) {
  while (s.out_off < s.out.size()) {
    std::size_t n = 0;
    const IoResult r = s.t.Write(s.out.data() + s.out_off, s.out.size() - s.out_off, &n);
    if (r == IoResult::kOk) {
      s.out_off += n;
      continue;
    }
    if (r != IoResult::kWouldBlock) s.broken = s.t.error();
    break;
  }
  if (!s.broken.empty()) return false;
  if (s.out_off == s.out.size()) {
    s.out.clear();
    s.out_off = 0;
  } else if (s.out_off > (1 << 20)) {
    s.out.erase(0, s.out_off);
    s.out_off = 0;
  }
  return true;
}

Deadline Connection::NextDeadline(const Session& s, Deadline now) const {
  Deadline next = now + std::chrono::seconds(1);
  for (const Pending& p : s.inflight) {
    if (p.done) continue;
    if (!p.merged) {
      next = std::min(next, p.deadline);
      continue;
    }
    for (const Group& g : p.merged->groups) {
      if (!g.done) next = std::min(next, g.deadline);
    }
  }
  if (!s.inflight.empty()) {
    next = std::min(
        next, s.inflight.front().deadline + std::chrono::microseconds(options_.stall_timeout));
  }
  for (const Queued& q : s.held) next = std::min(next, q.deadline);
  return next;
}

bool Connection::AwaitReadable(Session& s, Deadline now) {
  if (s.t.HasBuffered()) return true;
  pollfd fds[2] = {{s.t.fd(), s.t.PollEvents(!s.out.empty()), 0}, {wake_fd_, POLLIN, 0}};
  const Micros wait = std::max<Micros>(0, MicrosUntil(NextDeadline(s, now)));
  timespec ts{static_cast<time_t>(wait / 1'000'000), static_cast<long>((wait % 1'000'000) * 1000)};
  const int rc = ppoll(fds, 2, &ts, nullptr);
  if (rc < 0 && errno != EINTR) {
    s.broken = std::string("poll failed: ") + strerror(errno);
    return false;
  }
  if (rc > 0 && (fds[1].revents & POLLIN)) {
    std::uint64_t v;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &v, sizeof(v));
  }
  return rc > 0 && (fds[0].revents & (POLLIN | POLLOUT | POLLHUP | POLLERR));
}

void Connection::ReadReplies(Session& s) {
  for (;;) {
    std::size_t n = 0;
    const IoResult r = s.t.Read(s.buf, sizeof(s.buf), &n);
    if (r == IoResult::kOk) {
      s.reply_bytes += n;
      if (redisReaderFeed(s.reader.get(), s.buf, n) != REDIS_OK) {
        s.broken = "protocol error";
        break;
      }
      if (n < sizeof(s.buf) && !s.t.HasBuffered()) break;
      if (s.reply_bytes > kMaxReplyBytes) break;  // checked below
      continue;
    }
    if (r == IoResult::kClosed) {
      s.broken = "the server closed the connection";
    } else if (r == IoResult::kError) {
      s.broken = s.t.error();
    }
    break;
  }
  for (;;) {
    void* r = nullptr;
    if (redisReaderGetReply(s.reader.get(), &r) != REDIS_OK) {
      s.broken = "protocol error: " + ReaderErrorText(*s.reader);
      break;
    }
    if (r == nullptr) break;
    ReplyPtr reply(static_cast<redisReply*>(r));
    s.reply_bytes = s.reader->len - s.reader->pos;
    if (s.inflight.empty()) {
      s.broken = "unexpected reply from the server";
      break;
    }
    Dispatch(s, std::move(reply));
  }
  if (s.broken.empty() && s.reply_bytes > kMaxReplyBytes) {
    s.broken = "a reply exceeded " + std::to_string(kMaxReplyBytes >> 20) +
               " MB (not a reply sluice can expect)";
  }
}

void Connection::Dispatch(Session& s, ReplyPtr reply) {
  Pending p = std::move(s.inflight.front());
  s.inflight.pop_front();
  if (p.module && IsRefusedCommand(reply.get())) {
    // The module is gone (MODULE UNLOAD), or this user may not run its command: scripts
    // from now on; the callers resend theirs.
    module_.store(false, std::memory_order_release);
  }
  if (p.done) return;
  if (!p.merged) {
    p.callback(Status::Ok(), reply.get());
    return;
  }
  Merged& m = *p.merged;
  if (!m.reloaded && Classify(reply.get()) == ErrorKind::kNoScript) {
    // Nothing ran: load the grouped script on this connection and send the call
    // again, once, behind the load (the callers' deadlines still hold).
    m.reloaded = true;
    stats_->script_reloads.fetch_add(1, std::memory_order_relaxed);
    s.out.append(EncodeCommand({"SCRIPT", "LOAD", m.target->source}));
    s.out.append(m.wire);
    s.inflight.push_back(Pending{p.deadline, [](const Status&, const redisReply*) {}});
    s.inflight.push_back(std::move(p));
    return;
  }
  DeliverMerged(m, Status::Ok(), reply.get());
}

void Connection::ExpireOverdue(Session& s) {
  const Deadline now = SteadyClock::now();
  for (Pending& p : s.inflight) {
    if (p.merged && !p.done) {
      bool left = false;
      for (Group& g : p.merged->groups) {
        if (g.done) continue;
        if (g.deadline > now) {
          left = true;
          continue;
        }
        g.done = true;
        stats_->timeouts.fetch_add(1, std::memory_order_relaxed);
        g.callback(Status::DeadlineExceeded("Redis did not answer before the deadline"), nullptr);
        g.callback = nullptr;
      }
      p.done = !left;
      continue;
    }
    if (!p.done && p.deadline <= now) {
      p.done = true;
      stats_->timeouts.fetch_add(1, std::memory_order_relaxed);
      p.callback(Status::DeadlineExceeded("Redis did not answer before the deadline"), nullptr);
      p.callback = nullptr;
    }
  }
  if (s.broken.empty() && !s.inflight.empty() &&
      s.inflight.front().deadline + std::chrono::microseconds(options_.stall_timeout) <= now) {
    s.broken = "no reply for " + std::to_string(options_.stall_timeout / 1000) +
               " ms past a deadline (server stalled?)";
  }
}

void Connection::FailEverything(Session& s) {
  // Stopped or broken: nothing is queued for later.
  std::vector<Queued> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_.store(false, std::memory_order_release);
    left.swap(queue_);
    if (!s.broken.empty()) last_error_ = s.broken;
  }
  const Status st =
      s.broken.empty()
          ? Status::Unavailable("the Redis client is shutting down")
          : Status::Unavailable("connection to " + options_.url().Describe() + " lost (" +
                                s.broken + "); a command in flight may have run");
  for (Pending& p : s.inflight) {
    if (p.done) continue;
    if (p.merged) {
      DeliverMerged(*p.merged, st, nullptr);
    } else {
      p.callback(st, nullptr);
    }
  }
  for (std::vector<Queued>* queued : {&s.held, &left}) {
    for (Queued& q : *queued) {
      for (ReplyCallback& cb : q.callbacks) cb(st, nullptr);
    }
  }
}

}  // namespace sluice::redis
