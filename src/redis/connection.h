// Internal: connections to Redis over hiredis.
//
// hiredis parses replies (its redisReader) and performs the blocking handshake; the
// sockets are then driven by one I/O thread per connection with poll(). Callers never
// touch a socket: they queue a command with a deadline and a callback, the I/O thread
// writes everything queued in one write (automatic pipelining), matches replies in
// order, and calls each callback exactly once: with the reply, with
// kDeadlineExceeded when the deadline passes first (a late reply is then discarded),
// or with kUnavailable when the connection is down. There is no offline queue: while a
// connection is down, calls fail at once and the I/O thread reconnects with backoff.
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis/url.h"
#include "sluice/clock.h"
#include "sluice/status.h"

namespace sluice::redis {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

inline Deadline DeadlineAfter(Micros us) {
  return SteadyClock::now() + std::chrono::microseconds(us);
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

// An owned copy of a reply, for blocking callers.
struct Reply {
  int type = REDIS_REPLY_NIL;
  long long integer = 0;
  std::string str;  // string, status and error replies
  std::vector<Reply> elements;

  static Reply From(const redisReply& r);
  bool is_error() const { return type == REDIS_REPLY_ERROR; }
};

// Builds one command in the Redis wire format (RESP).
class CommandBuilder {
 public:
  explicit CommandBuilder(std::size_t argc);
  CommandBuilder& Add(std::string_view arg);
  CommandBuilder& Add(long long v);
  // The wire bytes; the builder is empty afterwards.
  std::string Take() { return std::move(wire_); }

 private:
  std::string wire_;
};

// Encodes a whole command at once.
std::string EncodeCommand(std::initializer_list<std::string_view> args);

// Called exactly once. `reply` is non-null iff `status` is ok (it may be an error
// reply); it is valid only during the call. Runs on a connection's I/O thread, or on
// the submitting thread when the call fails at once; it must not block.
using ReplyCallback = std::function<void(const Status& status, const redisReply* reply)>;

struct ConnectOptions {
  Url url;
  // Bound on connecting and on each handshake step.
  Micros connect_timeout = 1'000'000;
  // A connection whose oldest unanswered command is this far past its deadline is
  // declared broken (e.g. a SIGSTOP'd server) and reconnected.
  Micros stall_timeout = 1'000'000;
  // Loaded with SCRIPT LOAD on every (re)connect.
  std::vector<std::string> scripts;
};

// Counters shared by the connections of a client. Monotonic.
struct ConnectionStats {
  std::atomic<std::uint64_t> timeouts{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> disconnects{0};
};

// Connects, authenticates, selects the database, checks that the peer speaks Redis
// and loads `scripts` — blocking, each step bounded by connect_timeout. The error
// names what failed (refused, timed out, wrong password, not a Redis server).
Result<ContextPtr> Handshake(const ConnectOptions& options);

// One socket and its I/O thread. Thread-safe.
class Connection {
 public:
  // Connects now (Handshake); fails if that fails.
  static Result<std::unique_ptr<Connection>> Open(const ConnectOptions& options,
                                                  std::shared_ptr<ConnectionStats> stats);
  // Fails every queued command with kUnavailable and joins the I/O thread.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues `wire` (one or more commands: `callbacks.size()` of them, in order).
  // While disconnected, every callback is called at once with kUnavailable.
  void Submit(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks);
  void Submit(std::string wire, Deadline deadline, ReplyCallback callback);

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // Why the connection last went down (empty if it never did).
  std::string last_error() const;

 private:
  struct Pending {
    Deadline deadline;
    ReplyCallback callback;
    bool done = false;  // callback already called (timed out): discard the reply
  };
  struct Queued {
    std::string wire;
    Deadline deadline;
    std::vector<ReplyCallback> callbacks;
  };

  Connection(ConnectOptions options, std::shared_ptr<ConnectionStats> stats, ContextPtr ctx);
  void Run();
  // Drives the socket until it breaks or Stop; returns the reason it broke.
  std::string Serve();
  void FailAll(std::deque<Pending>& inflight, const Status& s);
  void Wake();

  const ConnectOptions options_;
  std::shared_ptr<ConnectionStats> stats_;
  ContextPtr ctx_;  // owned by the I/O thread while connected
  int wake_fd_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // for backoff sleeps
  std::vector<Queued> queue_;
  bool wake_pending_ = false;
  bool stop_ = false;
  std::string last_error_;
  std::atomic<bool> connected_{false};
  std::thread thread_;
};

struct ClientOptions {
  ConnectOptions connect;
  int connections = 2;
};

// A fixed set of connections shared by all callers, used round robin.
class Client {
 public:
  // Opens every connection; fails with the first connection's error.
  static Result<std::unique_ptr<Client>> Create(ClientOptions options);

  // Sends one command on a connected connection (round robin).
  void CallAsync(std::string wire, Deadline deadline, ReplyCallback callback);
  // Sends several commands (one callback each) pipelined in order on one connection.
  void CallAsync(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks);
  // Blocking: returns within the deadline whatever the server does.
  Result<Reply> Call(std::string wire, Deadline deadline);

  const ConnectionStats& stats() const { return *stats_; }
  const Url& url() const { return options_.connect.url; }

 private:
  explicit Client(ClientOptions options) : options_(std::move(options)) {}
  ClientOptions options_;
  std::shared_ptr<ConnectionStats> stats_ = std::make_shared<ConnectionStats>();
  Connection& Pick();
  std::vector<std::unique_ptr<Connection>> conns_;
  std::atomic<std::uint64_t> next_{0};
};

// Lets a thread wait for a callback with a hard deadline. The callback and the
// waiter race to claim it; the loser leaves the other alone, so a waiter that gave up
// never sees a late result. Share it (shared_ptr) between the two.
template <typename T>
class Waiter {
 public:
  // Called by the producer: fills the result unless the waiter already gave up.
  template <typename F>
  void Complete(F&& fill) {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return;
    std::lock_guard<std::mutex> lock(mu_);
    fill(value_);
    done_ = true;
    cv_.notify_all();  // under the lock: the waiter may destroy its reference after it
  }
  // Waits for Complete until `deadline`. False: gave up (nothing will be filled).
  bool Wait(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, deadline, [&] { return done_; })) return true;
    if (!claimed_.exchange(true, std::memory_order_acq_rel)) return false;
    cv_.wait(lock, [&] { return done_; });  // the producer is filling it right now
    return true;
  }
  T& value() { return value_; }

 private:
  std::atomic<bool> claimed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  T value_{};
};

}  // namespace sluice::redis
