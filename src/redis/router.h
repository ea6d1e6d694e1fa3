// Internal: the seam between RedisStore and the topology it runs on. RedisStore only
// ever talks to a Router; each topology is one implementation:
//   StandaloneRouter  one server (redis://, rediss://, unix://)            standalone_router.h
//   a cluster router  per-slot node lookup, MOVED/ASK/TRYAGAIN/CLUSTERDOWN  (cluster_router.h)
//   a sentinel router a standalone router whose endpoint the sentinels resolve (sentinel_router.h)
//
// Contract every implementation keeps:
// - Routing: `routing_key` is a key the command touches; its hash slot (the part in
//   {braces} when present, CRC16 & 16383) picks the node. Every key of one command
//   shares that slot (sluice keys carry a hash tag). Standalone ignores it.
// - Deadlines: `done` is called exactly once, by `deadline` at the latest (plus the
//   I/O thread's scheduling). Every resend, redirect, refresh or discovery a router
//   does on behalf of a call happens inside that call's deadline; what is left when it
//   passes is the caller's kDeadlineExceeded.
// - Resending: a router (or the node client under it) may resend a command ONLY after
//   a reply that proves it did not run: MOVED, ASK, TRYAGAIN, CLUSTERDOWN, NOSCRIPT,
//   LOADING, READONLY (ProvesNotRun in reply.h), or a connection that failed before
//   the command was written. A timeout or a connection lost after sending is handed to
//   the caller (kDeadlineExceeded / kUnavailable): the command may have run.
// - Scripts: a Command's `script` is loaded on the node that answered NOSCRIPT, on that
//   node only, and the command resent once there.
// - Callbacks run on an I/O thread of the node that answered (or, on an immediate
//   failure, on the submitting thread). They must not block; they may submit again.
// - Errors: kUnavailable (no connection to the node, connection lost),
//   kDeadlineExceeded; an error *reply* that is not acted on is passed through as a
//   reply for the caller to read.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "redis/connection.h"
#include "redis/deadline.h"
#include "redis/node_client.h"
#include "redis/reply.h"

namespace sluice::redis {

class Router {
 public:
  virtual ~Router() = default;

  // Asynchronous: sends `command` to the node that owns `routing_key`.
  virtual void Send(std::string_view routing_key, Command command, Deadline deadline,
                    ReplyCallback done) = 0;

  // Blocking: as Send, returns by `deadline` whatever the servers do.
  Result<Reply> Call(std::string_view routing_key, Command command, Deadline deadline) {
    return CallBlocking(
        [&](ReplyCallback cb) { Send(routing_key, std::move(command), deadline, std::move(cb)); },
        deadline);
  }

  // Calls `fn` once for each primary known now (startup checks such as
  // maxmemory-policy, or sending a command to every node). Not for the hot path.
  virtual void ForEachPrimary(const std::function<void(NodeClient&)>& fn) = 0;

  // Counters of every node (timeouts, reconnects, script reloads...).
  virtual const ConnectionStats& stats() const = 0;

  // The URL (passwords masked), for messages.
  virtual std::string Describe() const = 0;
};

}  // namespace sluice::redis
