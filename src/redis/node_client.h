// Internal: a fixed set of connections to ONE Redis server, shared by all callers.
//
// Commands go round robin to a connected connection. An EVALSHA sent with its
// script's source is loaded on demand: a NOSCRIPT reply (which proves the script did
// not run) triggers SCRIPT LOAD and one resend, pipelined on one connection, within
// the caller's deadline. A router owns one NodeClient per server it talks to.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.h"
#include "redis/deadline.h"
#include "redis/reply.h"

namespace sluice::redis {

struct NodeOptions {
  ConnectOptions connect;
  int connections = 2;
  // True: Create connects them all (any failure is Create's error). False: Create tries
  // one connection; if the server is unreachable (kUnavailable) it returns with every
  // connection connecting in the background (calls fail with kUnavailable until one is
  // up); any other handshake error (wrong password, bad database) is still returned.
  bool connect_now = true;
  // Where immediate failures are delivered; null: the node makes its own. A router
  // may share one across its nodes.
  std::shared_ptr<CompletionQueue> completions;
};

// One command for a node. `script`, when set, is the source of the script `wire`
// EVALSHAs (static storage): NOSCRIPT is then answered by loading it and resending once.
// `coalesce`, when its target is set, lets the connection merge it with other calls
// queued at the same time (connection.h, CoalesceInfo). `module_wire`, when set (with a
// script), is the same decision as the native module's command: sent instead of `wire`
// to a server that has the module (connection.h); a server whose module is gone answers
// "unknown command", and the script is then sent (loaded first), once.
struct Command {
  std::string wire;
  std::string_view script;
  CoalesceInfo coalesce = {};
  std::string module_wire = {};
};

class NodeClient {
 public:
  // Stops every connection, then delivers pending failures, then frees them.
  ~NodeClient();
  // Opens every connection; fails with the first connection's error.
  static Result<std::unique_ptr<NodeClient>> Create(NodeOptions options,
                                                    std::shared_ptr<ConnectionStats> stats);

  // Sends one command; `done` is called exactly once (see ReplyCallback).
  void Send(Command command, Deadline deadline, ReplyCallback done);
  // Sends several commands (one callback each) pipelined in order on one connection
  // (e.g. ASKING + the command).
  void SendPipeline(std::string wire, Deadline deadline, std::vector<ReplyCallback> callbacks);
  // Blocking: returns within the deadline whatever the server does.
  Result<Reply> Call(Command command, Deadline deadline);

  const Url& url() const { return options_.connect.url(); }
  // True when at least one connection is up.
  bool connected() const;
  ConnectionStats& stats() { return *stats_; }

 private:
  NodeClient(NodeOptions options, std::shared_ptr<ConnectionStats> stats)
      : options_(std::move(options)), stats_(std::move(stats)) {}
  Connection& Pick();

  NodeOptions options_;
  std::shared_ptr<ConnectionStats> stats_;
  std::shared_ptr<CompletionQueue> completions_;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::atomic<std::uint64_t> next_{0};
};

// Blocking wait for one callback-style call, bounded by `deadline`.
Result<Reply> CallBlocking(const std::function<void(ReplyCallback)>& send, Deadline deadline);

}  // namespace sluice::redis
