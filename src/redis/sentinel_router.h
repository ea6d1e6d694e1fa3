// Internal: the client of a Sentinel-managed primary. It sends every command to the
// primary the sentinels report, and moves to a new one when they announce a switch
// (+switch-master), when a sentinel promotes a replica (+failover-state-wait-promotion:
// as soon as that replica's ROLE says master), when the primary is lost, or when it
// answers READONLY. Moving at the promotion rather than at +switch-master (which
// Sentinel publishes only after it has seen the promotion in INFO, up to a second
// later) keeps the writes sent to the old primary meanwhile, lost at its demotion, to
// milliseconds.
//
// Calls are never held for discovery: a call goes to the primary the router has at the
// moment; if that one is down or demoted the call fails at once (Unavailable, or the
// READONLY error, which proves the command did not run) and the caller's failure mode
// decides. Discovery runs on a thread of its own, one attempt at a time, each bounded
// by connect_timeout, with backoff (50 ms to 1 s) while it fails.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "redis/node_client.h"
#include "redis/router.h"
#include "redis/sentinel.h"

namespace sluice::redis {

struct SentinelRouterOptions {
  SentinelOptions sentinel;
  // For the primary's connections: everything but the URL's host and port, which come
  // from the sentinels (user, password, db, TLS, timeouts, scripts, connection count).
  NodeOptions node;
  // For messages: the masked redis-sentinel:// URL.
  std::string describe;
};

class SentinelRouter final : public Router {
 public:
  // Asks the sentinels (bounded by connect_timeout), connects to the primary and checks
  // its ROLE. Errors as AskSentinels, the primary's handshake errors, or Unavailable
  // when the reported node is not a master.
  static Result<std::unique_ptr<SentinelRouter>> Create(SentinelRouterOptions options);
  // Stops following, then closes the primary's connections (calls in flight fail with
  // Unavailable). Waits for a discovery step or sentinel handshake under way, so it may
  // take up to connect_timeout.
  ~SentinelRouter() override;
  SentinelRouter(const SentinelRouter&) = delete;
  SentinelRouter& operator=(const SentinelRouter&) = delete;

  // To the current primary (the routing key is ignored). A lost connection or a
  // READONLY reply also makes the router ask again; the call itself is not held.
  void Send(std::string_view routing_key, Command command, Deadline deadline,
            ReplyCallback done) override;
  // The current primary.
  void ForEachPrimary(const std::function<void(NodeClient&)>& fn) override;
  // Counters of every node the router used (one set, monotonic across switches).
  const ConnectionStats& stats() const override { return *stats_; }
  std::string Describe() const override { return options_.describe; }

  // The primary calls go to now.
  HostPort primary() const;
  // Times the router moved to another primary.
  std::uint64_t switches() const { return switches_.load(std::memory_order_relaxed); }

 private:
  explicit SentinelRouter(SentinelRouterOptions options) : options_(std::move(options)) {}
  // Connects to `at` and checks that it is a master; bounded by connect_timeout.
  Result<std::shared_ptr<NodeClient>> Connect(const HostPort& at) const;
  std::shared_ptr<NodeClient> Current() const;
  ReplyCallback Watch(ReplyCallback cb);
  // Asks for discovery (from any thread, never blocks): with an announced address, or
  // nullopt to ask the sentinels.
  void Trigger(std::optional<HostPort> address);
  void Resolve();

  const SentinelRouterOptions options_;
  std::shared_ptr<ConnectionStats> stats_ = std::make_shared<ConnectionStats>();
  mutable std::mutex mu_;
  std::shared_ptr<NodeClient> node_;
  HostPort primary_;
  std::atomic<std::uint64_t> switches_{0};

  std::mutex resolve_mu_;
  std::condition_variable resolve_cv_;
  bool pending_ = false;
  std::optional<HostPort> announced_;
  bool stop_ = false;
  std::thread resolver_;
  // One per sentinel: the leader of a failover announces it first.
  std::vector<std::unique_ptr<SwitchWatcher>> watchers_;
};

}  // namespace sluice::redis
