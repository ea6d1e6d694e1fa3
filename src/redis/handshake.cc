#include "redis/handshake.h"

#include <pthread.h>
#include <signal.h>

#include "redis/module/wire.h"
#include "redis/resp.h"
#include "redis/tls_transport.h"

namespace sluice::redis {

Result<ReplyPtr> RoundTrip(Transport& t, std::string_view wire, Deadline deadline,
                           const std::string& where, const char* step, std::size_t max_bytes,
                           int cancel_fd) {
  auto timed_out = [&] {
    return Status::Unavailable(where + " did not answer " + step + " in time (the handshake " +
                               "is bounded by connect_timeout)");
  };
  std::size_t off = 0;
  while (off < wire.size()) {
    std::size_t n = 0;
    switch (t.Write(wire.data() + off, wire.size() - off, &n)) {
      case IoResult::kOk:
        off += n;
        continue;
      case IoResult::kWouldBlock:
        if (!PollUntil(t.fd(), t.PollEvents(true), deadline, cancel_fd)) return timed_out();
        continue;
      default:
        return Status::Unavailable(where + ": " + step + " failed: " + t.error());
    }
  }
  ReaderPtr reader = NewReader();
  if (!reader) return Status::Internal("out of memory");
  std::size_t received = 0;
  char buf[4096];
  for (;;) {
    void* r = nullptr;
    if (redisReaderGetReply(reader.get(), &r) != REDIS_OK) {
      return Status::Unavailable(where + " did not answer like a Redis server (" + step +
                                 "): " + ReaderErrorText(*reader));
    }
    if (r != nullptr) return ReplyPtr(static_cast<redisReply*>(r));
    std::size_t n = 0;
    switch (t.Read(buf, sizeof(buf), &n)) {
      case IoResult::kOk:
        received += n;
        if (received > max_bytes) {
          return Status::Unavailable(where + " sent more than " + std::to_string(max_bytes) +
                                     " bytes in reply to " + step + " (is it a Redis server?)");
        }
        if (redisReaderFeed(reader.get(), buf, n) != REDIS_OK) {
          return Status::Unavailable(where + " did not answer like a Redis server (" + step + ")");
        }
        continue;
      case IoResult::kWouldBlock:
        if (!t.HasBuffered() && !PollUntil(t.fd(), t.PollEvents(false), deadline, cancel_fd)) {
          return timed_out();
        }
        continue;
      case IoResult::kClosed:
        return Status::Unavailable(where + " closed the connection during " + step +
                                   " (is it a Redis server?)");
      default:
        return Status::Unavailable(where + ": " + step + " failed: " + t.error());
    }
  }
}

namespace {

// OpenSSL writes with write(): a peer that closed the socket would raise SIGPIPE and
// kill the process. While this guard lives, SIGPIPE is blocked in this thread (the
// write then fails with EPIPE); one that we raised is discarded before unblocking.
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

void BlockSigpipeInThisThread() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

Result<std::unique_ptr<Transport>> ConnectAndHandshake(const HandshakeOptions& o, int cancel_fd,
                                                       HandshakeInfo* info) {
  SigpipeGuard no_sigpipe;
  const Url& u = o.url;
  const std::string where = u.Describe();
  const Deadline deadline = DeadlineAfter(o.connect_timeout);
  auto t = Connect(u, deadline, cancel_fd);
  if (!t.ok()) {
    if (MicrosUntil(deadline) <= 0) {
      return Status::Unavailable("cannot connect to " + where + ": timed out after " +
                                 std::to_string(o.connect_timeout / 1000) + " ms");
    }
    return t.status();
  }
  if (u.tls.enabled) {
    t = StartTls(std::move(*t), u, deadline, cancel_fd);
    if (!t.ok()) return t.status();
  }
  Transport& tr = **t;
  auto text = [](const ReplyPtr& r) { return std::string(r->str, r->len); };

  if (!u.password.empty()) {
    auto r = RoundTrip(tr,
                       u.user.empty() ? EncodeCommand({"AUTH", u.password})
                                      : EncodeCommand({"AUTH", u.user, u.password}),
                       deadline, where, "AUTH", kMaxHandshakeReplyBytes, cancel_fd);
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("authentication to " + where + " failed: " + text(*r));
    }
  }
  {
    auto r = RoundTrip(tr, EncodeCommand({"PING"}), deadline, where, "PING",
                       kMaxHandshakeReplyBytes, cancel_fd);
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      const std::string e = text(*r);
      if (e.starts_with("NOAUTH")) {
        return Status::InvalidArgument(where +
                                       " requires a password: give it in the URL, "
                                       "redis://[user:]password@host:port");
      }
      return Status::Unavailable(where + " refused PING: " + e);
    }
    if ((*r)->type != REDIS_REPLY_STATUS || text(*r) != "PONG") {
      return Status::Unavailable(where + " did not answer PING like a Redis server");
    }
  }
  if (u.db != 0) {
    const std::string db = std::to_string(u.db);
    auto r = RoundTrip(tr, EncodeCommand({"SELECT", db}), deadline, where, "SELECT",
                       kMaxHandshakeReplyBytes, cancel_fd);
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("cannot select database " + db + " on " + where + ": " +
                                     text(*r));
    }
  }
  if (o.probe_module) {
    // (a reply error, e.g. an unknown command or NOPERM, is "no module": Lua decides)
    auto r = RoundTrip(tr, EncodeCommand({kModuleVersionCommand}), deadline, where,
                       "SLUICE.VERSION", kMaxHandshakeReplyBytes, cancel_fd);
    if (!r.ok()) return r.status();
    if (info != nullptr) {
      info->module = (*r)->type == REDIS_REPLY_INTEGER && (*r)->integer == kModuleWireVersion;
    }
  }
  for (const std::string& script : o.scripts) {
    auto r =
        RoundTrip(tr, EncodeCommand({"SCRIPT", "LOAD", script}), deadline, where, "SCRIPT LOAD");
    if (!r.ok()) return r.status();
    if ((*r)->type == REDIS_REPLY_ERROR) {
      return Status::Unavailable("SCRIPT LOAD on " + where + " failed: " + text(*r));
    }
  }
  return std::move(*t);
}

}  // namespace sluice::redis
