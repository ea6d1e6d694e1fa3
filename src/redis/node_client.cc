#include "redis/node_client.h"

#include <algorithm>

#include "redis/waiter.h"

namespace sluice::redis {

Result<std::unique_ptr<NodeClient>> NodeClient::Create(NodeOptions options,
                                                       std::shared_ptr<ConnectionStats> stats) {
  const int n = std::max(1, options.connections);
  std::unique_ptr<NodeClient> c(new NodeClient(std::move(options), std::move(stats)));
  c->completions_ =
      c->options_.completions ? c->options_.completions : std::make_shared<CompletionQueue>();
  // Without connect_now the first connection is still tried once: a server that is up
  // is used at once, and one that answers but refuses us (a wrong password, a bad
  // database: InvalidArgument) is a configuration error, not an outage to wait out.
  // Only an unreachable server (kUnavailable) leaves every connection to the background.
  bool eager = c->options_.connect_now;
  for (int i = 0; i < n; ++i) {
    if (!eager && i > 0) {
      c->conns_.push_back(Connection::Start(c->options_.connect, c->stats_, c->completions_));
      continue;
    }
    auto conn = Connection::Open(c->options_.connect, c->stats_, c->completions_);
    if (!conn.ok()) {
      if (eager || conn.status().code() != ErrorCode::kUnavailable) return conn.status();
      c->conns_.push_back(Connection::Start(c->options_.connect, c->stats_, c->completions_));
      continue;
    }
    eager = true;  // the server is up: connect the others now too
    c->conns_.push_back(std::move(*conn));
  }
  return c;
}

NodeClient::~NodeClient() {
  for (auto& c : conns_) c->Shutdown();
  completions_.reset();  // the last reference (unless shared) drains and joins
}

bool NodeClient::connected() const {
  for (const auto& c : conns_) {
    if (c->connected()) return true;
  }
  return false;
}

Connection& NodeClient::Pick() {
  const std::size_t n = conns_.size();
  const std::size_t start = next_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t k = 0; k < n; ++k) {
    Connection& c = *conns_[(start + k) % n];
    if (c.connected()) return c;
  }
  return *conns_[start % n];  // all down: it fails the call at once
}

void NodeClient::SendPipeline(std::string wire, Deadline deadline,
                              std::vector<ReplyCallback> callbacks) {
  Pick().Submit(std::move(wire), deadline, std::move(callbacks));
}

void NodeClient::Send(Command command, Deadline deadline, ReplyCallback done) {
  if (command.script.empty()) {
    if (command.coalesce.target != nullptr || !command.module_wire.empty()) {
      // (a router that handles NOSCRIPT and a module gone itself: cluster_router.cc)
      Pick().Submit(std::move(command.wire), deadline, std::move(done), std::move(command.coalesce),
                    std::move(command.module_wire));
    } else {
      Pick().Submit(std::move(command.wire), deadline, std::move(done));
    }
    return;
  }
  // Keep the command for a resend after NOSCRIPT (it proves the script did not run;
  // a call that timed out or lost its connection never gets here, so it is never
  // resent).
  auto wire = std::make_shared<std::string>(std::move(command.wire));
  const std::string_view script = command.script;
  const bool module = !command.module_wire.empty();
  auto on_reply = [this, wire, script, deadline, module, done = std::move(done)](
                      const Status& s, const redisReply* r) mutable {
    const bool resend =
        s.ok() && (Classify(r) == ErrorKind::kNoScript || (module && IsRefusedCommand(r)));
    if (!resend || SteadyClock::now() >= deadline) {
      done(s, r);
      return;
    }
    // This server lost the script (restart, failover, SCRIPT FLUSH), or its module, or
    // refused the module's command to this user (nothing ran either way): load the script and
    // resend it, pipelined on one connection so the load comes first. (A call merged with others
    // gets here only if the merged call's own reload failed too; it is then resent alone.)
    stats_->script_reloads.fetch_add(1, std::memory_order_relaxed);
    std::string both = EncodeCommand({"SCRIPT", "LOAD", script});
    both += *wire;
    std::vector<ReplyCallback> cbs;
    cbs.push_back([](const Status&, const redisReply*) {});  // the resend's reply tells
    cbs.push_back(std::move(done));
    Pick().Submit(std::move(both), deadline, std::move(cbs));
  };
  if (command.coalesce.target != nullptr || module) {
    Pick().Submit(std::string(*wire), deadline, std::move(on_reply), std::move(command.coalesce),
                  std::move(command.module_wire));
    return;
  }
  Pick().Submit(std::string(*wire), deadline, std::move(on_reply));
}

Result<Reply> NodeClient::Call(Command command, Deadline deadline) {
  return CallBlocking([&](ReplyCallback cb) { Send(std::move(command), deadline, std::move(cb)); },
                      deadline);
}

Result<Reply> CallBlocking(const std::function<void(ReplyCallback)>& send, Deadline deadline) {
  struct Out {
    Status status;
    Reply reply;
  };
  auto w = std::make_shared<Waiter<Out>>();
  send([w](const Status& s, const redisReply* r) {
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
