// Internal: one connection to one Redis server — a Transport and the I/O thread that
// drives it.
//
// Callers never touch the socket: they queue a command with a deadline and a callback,
// the I/O thread writes everything queued in one write (automatic pipelining), matches
// replies in order, and calls each callback exactly once: with the reply, with
// kDeadlineExceeded when the deadline passes first (a late reply is then discarded),
// or with kUnavailable when the connection is down or breaks (a command in flight may
// have run). There is no offline queue: while a connection is down, calls fail at once
// and the I/O thread reconnects in the background with backoff.
//
// Where callbacks run: replies, timeouts and a lost connection on the I/O thread;
// immediate failures (not connected, shutting down) on the CompletionQueue's thread.
// Never on the submitting thread, so a callback may submit again without starving
// anything: reconnection runs on the I/O thread whatever callbacks do.
//
// Scripts: only the first connect (Open) runs HandshakeOptions::scripts; a reconnect
// is just connect + AUTH/SELECT/PING (one round trip each), so a killed connection is
// back in well under a millisecond on loopback. The server keeps its script cache
// across connections; when it did lose it, NodeClient answers NOSCRIPT.
//
// Bounds: the whole (re)connect handshake by connect_timeout; a reply by
// kMaxReplyBytes (a larger one, or an endless stream, breaks the connection); an
// unanswered command by its deadline, and the connection itself by stall_timeout past
// the oldest command's deadline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis/completion_queue.h"
#include "redis/deadline.h"
#include "redis/handshake.h"
#include "redis/reply.h"
#include "redis/resp.h"  // IWYU pragma: export (callers build commands with it)
#include "redis/transport.h"
#include "redis/url.h"
#include "sluice/status.h"

namespace sluice::redis {

// The largest reply a connection accepts. sluice's own replies are a few hundred
// bytes (4 integers per check); the largest any caller expects is CLUSTER SHARDS /
// CLUSTER SLOTS of a big cluster (about 300 B per node: 1000 nodes fit in 300 KB).
// 8 MB leaves a wide margin while bounding what a hostile or broken peer can make a
// client allocate per connection.
inline constexpr std::size_t kMaxReplyBytes = 8 * 1024 * 1024;

// ReplyCallback (completion_queue.h) is called exactly once. `reply` is non-null iff
// `status` is ok (it may be an error reply); it is valid only during the call. It runs
// on an I/O thread or the completion thread (see above) and must not block.

struct ConnectOptions {
  HandshakeOptions handshake;
  // A connection whose oldest unanswered command is this far past its deadline is
  // declared broken (e.g. a SIGSTOP'd server) and reconnected.
  Micros stall_timeout = 1'000'000;
  const Url& url() const { return handshake.url; }
};

// Counters shared by the connections of a client (or of every node of a router).
// Monotonic.
struct ConnectionStats {
  std::atomic<std::uint64_t> timeouts{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> disconnects{0};
  std::atomic<std::uint64_t> script_reloads{0};
  // Coalescing: merged calls sent, and the groups (callers' calls) they carried.
  std::atomic<std::uint64_t> coalesced_calls{0};
  std::atomic<std::uint64_t> coalesced_groups{0};
  // Cluster routing (cluster_router.h).
  std::atomic<std::uint64_t> moved{0};
  std::atomic<std::uint64_t> ask{0};
  std::atomic<std::uint64_t> cluster_retries{0};
  std::atomic<std::uint64_t> topology_refreshes{0};
};

// Coalescing (docs/redis.md, "Coalesced calls"): a script call may be marked as one
// group that can share ONE call of a grouped script with the other groups queued on the
// same connection when the I/O thread takes its queue. The I/O thread builds the merged
// EVALSHA from each call's KEYS (a byte range of its own wire) and the ARGV the target
// encodes from the groups' data, hands each caller its part of the reply, times out
// each caller at its own deadline, and fails every caller of a merged call that may
// have run (timeout, lost connection): a merged call is never resent, except after
// NOSCRIPT (which proves nothing ran), once, after loading the grouped script on this
// connection. Calls queued in smaller numbers than `min_groups` are sent as they are.
//
// Group commit (Connection::Hold): while a mergeable call is in flight on the
// connection, the mergeable calls taken from the queue wait, unsent, for its reply (or
// until a whole merged call's worth, max_groups, waits) and then leave together; a
// mergeable call with none in flight leaves at once, and other commands are never held.
// A held call times out at its own deadline without being sent.
//
// The grouped script's contract: KEYS are every group's keys in order; ARGV is what
// `encode` wrote; the reply is one flat array, each group's part in order (`nreplies`
// units, each `unit_size` elements long), or an error reply, which every group gets.
struct CoalesceInfo;
struct CoalesceTarget {
  std::string_view sha;     // the grouped script's SHA1 (static storage)
  std::string_view source;  // its source, loaded on NOSCRIPT
  std::size_t max_groups;   // at most this many groups in one call (>= 2)
  // Fewer groups than this queued together are sent as they are: the grouped script's
  // fixed cost per call would outweigh what merging them saves. Module commands merge
  // from two groups on, whatever this says.
  std::size_t min_groups = 2;
  // Appends the merged call's ARGV (RESP bulk strings) for `groups` to `out` and
  // returns how many. Runs on the I/O thread.
  std::function<std::size_t(const std::vector<const CoalesceInfo*>& groups, std::string& out)>
      encode;
  // How many elements the unit of the reply starting at `e` takes (>= 1), or 0 when it
  // is malformed; null: one element each.
  std::size_t (*unit_size)(const redisReply& e) = nullptr;
  // The native module (see Connection): appends the module command's arguments after
  // the keys for `groups` (each with a module wire) and returns how many; null: none.
  // Module calls of every target share one command, encoded by the first one's: the
  // targets of one connection must agree on this and on unit_size.
  std::function<std::size_t(const std::vector<const CoalesceInfo*>& groups, std::string& out)>
      encode_module;
};

// What a call says about itself to be merged.
struct CoalesceInfo {
  const CoalesceTarget* target = nullptr;  // null: not mergeable
  int slot = 0;  // only calls with the same target and slot share a call (Redis Cluster)
  // The byte range of the call's KEYS in its wire (RESP bulk strings), and their count.
  std::uint32_t keys_begin = 0, keys_end = 0;
  std::uint32_t nkeys = 0;
  std::uint32_t nreplies = 0;   // its units in the merged reply (CoalesceTarget::unit_size)
  std::vector<long long> data;  // what the target's `encode` reads
  // Each check's string, when one of them has one (else empty): a permit id or a usage
  // record's id (script_wire.h, GroupData), owned here since the caller's views may be
  // gone by the time the I/O thread encodes the merged call.
  std::vector<std::string> ids;
};

// True when `r` says the server refused a command without running it: it has no such
// command (a module wire sent to a server whose module is gone), or the user may not run
// it (an ACL that allows SLUICE.DECIDE but not SLUICE.DECIDE1).
bool IsRefusedCommand(const redisReply* r);

// One socket and its I/O thread. Thread-safe.
//
// The native module (docs/redis.md, "The native module"): with
// HandshakeOptions::probe_module every (re)connect asks the server whether it has
// sluice's module. A script call submitted with a `module_wire` (the same decision as
// the module's command) is then sent as that wire on a connection whose server has it,
// and as the script otherwise; merged calls of module wires become one module command
// (CoalesceTarget::encode_module). A module wire refused unrun (IsRefusedCommand) turns
// the module off for this connection until it reconnects (the caller resends the
// script).
class Connection {
 public:
  // Connects now (ConnectAndHandshake); fails if that fails.
  static Result<std::unique_ptr<Connection>> Open(const ConnectOptions& options,
                                                  std::shared_ptr<ConnectionStats> stats,
                                                  std::shared_ptr<CompletionQueue> completions);
  // Starts disconnected: the I/O thread connects in the background (calls fail with
  // kUnavailable until it succeeds). For a client that must start while Redis is down.
  static std::unique_ptr<Connection> Start(const ConnectOptions& options,
                                           std::shared_ptr<ConnectionStats> stats,
                                           std::shared_ptr<CompletionQueue> completions);
  // Fails every queued command with kUnavailable and joins the I/O thread; a
  // (re)connect in progress is abandoned at once.
  ~Connection();
  // The destructor's work, for an owner that must stop every connection before it
  // destroys any (callbacks may still submit to the others). Idempotent.
  void Shutdown();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues `wire` (one or more commands: `callbacks.size()` of them, in order).
  // While disconnected, every callback is called at once with kUnavailable.
  void Submit(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks);
  void Submit(std::string wire, Deadline deadline, ReplyCallback callback);
  // One script call that may be merged with others (CoalesceInfo); `callback` gets its
  // own reply, or its group's element of a merged call's reply (or the merged call's
  // error reply, e.g. MOVED, which then proves that no group ran).
  void Submit(std::string wire, Deadline deadline, ReplyCallback callback, CoalesceInfo coalesce,
              std::string module_wire = {});

  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // Whether the server of the current connection has the native module.
  bool module() const { return module_.load(std::memory_order_acquire); }
  // Why the connection last went down (empty if it never did).
  std::string last_error() const;

 private:
  // One caller of a merged call.
  struct Group {
    Deadline deadline;
    ReplyCallback callback;
    std::uint32_t nreplies = 0;
    bool done = false;  // timed out already
  };
  struct Merged {
    const CoalesceTarget* target;
    std::string wire;  // for the one resend after NOSCRIPT
    std::vector<Group> groups;
    bool reloaded = false;
    bool module = false;  // the module's command, not the grouped script
  };
  struct Pending {
    Deadline deadline;  // a merged call's: its last group's
    ReplyCallback callback;
    bool done = false;               // callback already called (timed out): discard the reply
    std::shared_ptr<Merged> merged;  // set: a merged call (callback unused)
    bool module = false;             // a module wire was sent
    bool coalescible = false;        // a mergeable call (merged or sent on its own)
  };
  struct Queued {
    std::string wire;
    Deadline deadline;
    std::vector<ReplyCallback> callbacks;
    CoalesceInfo coalesce;
    std::string module_wire;  // empty: none
  };

  Connection(ConnectOptions options, std::shared_ptr<ConnectionStats> stats,
             std::shared_ptr<CompletionQueue> completions, std::unique_ptr<Transport> transport);
  void Run();
  // Drives the transport until it breaks or Stop; returns the reason it broke.
  std::string Serve();
  // Serve's steps, on one Session (connection.cc).
  struct Session;
  // Writes what the transport takes; false when it broke (Session::broken says why).
  bool Flush(Session& s);
  // The earliest caller deadline in flight, or the stall bound, capped at now + 1 s.
  Deadline NextDeadline(const Session& s, Deadline now) const;
  // Sleeps until the socket is ready, a caller wakes the thread, or NextDeadline;
  // true when there is something to read.
  bool AwaitReadable(Session& s, Deadline now);
  // Reads what arrived and hands each complete reply to Dispatch, in order.
  void ReadReplies(Session& s);
  // Gives one reply to the oldest command in flight (reloading a merged call's script
  // once on NOSCRIPT).
  void Dispatch(Session& s, ReplyPtr reply);
  // Times out overdue callers; marks the connection broken when it stalls.
  void ExpireOverdue(Session& s);
  // Fails everything in flight and queued with kUnavailable (stopped or broken).
  void FailEverything(Session& s);
  void Wake();
  // Fails the calls of `queued` whose deadline passed before they were sent, and drops
  // them.
  void ExpireUnsent(std::vector<Queued>& queued, Deadline now);
  // Group commit: while a mergeable call is in `inflight`, the mergeable calls of `batch`
  // wait in `held` (its reply frees them) until a whole merged call's worth is held;
  // otherwise the held calls go back into `batch`, ahead of it. Under load the calls
  // queued during one round trip share one call; a call alone goes at once.
  void Hold(std::vector<Queued>& held, std::vector<Queued>& batch,
            const std::deque<Pending>& inflight);
  // Whether `q` may be merged with other calls (CoalesceInfo).
  static bool Mergeable(const Queued& q);
  // Appends `batch` (not expired) to `out` and `inflight`, merging the mergeable calls.
  void Emit(std::vector<Queued>& batch, std::string& out, std::deque<Pending>& inflight);
  // One call of a lane (Emit): its module wire when the server has the module.
  void EmitOne(Queued& q, std::string& out, std::deque<Pending>& inflight);
  // The merged wire of lane[from, to) (Emit), a module command when `module`.
  std::shared_ptr<Merged> Merge(const std::vector<Queued*>& lane, std::size_t from, std::size_t to,
                                bool module);
  // Hands a merged call's reply (or failure) to each caller not timed out yet.
  void DeliverMerged(Merged& m, const Status& s, const redisReply* r);

  const ConnectOptions options_;
  std::shared_ptr<ConnectionStats> stats_;
  std::shared_ptr<CompletionQueue> completions_;
  std::unique_ptr<Transport> transport_;  // owned by the I/O thread while connected
  int wake_fd_ = -1;
  int stop_fd_ = -1;  // readable once the destructor runs: aborts a (re)connect

  mutable std::mutex mu_;
  std::condition_variable cv_;  // for backoff sleeps
  std::vector<Queued> queue_;
  bool wake_pending_ = false;
  bool stop_ = false;
  std::string last_error_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> module_{false};  // set by each handshake (probe_module)
  bool ever_connected_ = false;      // I/O thread only
  std::thread thread_;
};

}  // namespace sluice::redis
