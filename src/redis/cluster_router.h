// Internal: the Router for Redis Cluster (redis-cluster://, rediss-cluster://).
//
// - Slot map: from CLUSTER SHARDS (CLUSTER SLOTS on servers without it), asked of a
//   known primary or, failing that, of a seed node. One NodeClient (pipelined
//   connections, scripts loaded at connect) per primary. Decisions go to primaries
//   only.
// - Hot path: slot = KeySlot(routing key) -> owner index -> NodeClient::Send. No lock:
//   the slot table and the node table are arrays of atomics; nodes are only ever
//   added (a node that stopped being a primary keeps its idle client until the
//   router is destroyed, and no slot points to it).
// - Replies that prove the command did not run are acted on, within the call's
//   deadline and at most kMaxRedirects times:
//     MOVED        the slot is patched at once, a refresh is requested, resent there;
//     ASK          (SCRIPT LOAD +) ASKING + the command on the target, map untouched;
//     TRYAGAIN, CLUSTERDOWN, LOADING   resent after a short backoff (1, 2, 4... ms);
//     READONLY     (a demoted primary) a refresh is requested, resent after a backoff;
//     NOSCRIPT     the script is loaded on that node and the call resent once (here,
//                  not in NodeClient: the call's wire is kept here anyway).
//   A timeout or a connection lost after sending goes to the caller as is. A slot whose
//   primary has no live connection fails at once with kUnavailable (nothing was
//   sent) and requests a refresh: during a failover, the caller's failure mode
//   decides until the promoted replica is in the map. A node the router has no client
//   for yet (a promoted replica a MOVED names, a new primary of a fresh map) is
//   connected by the refresh thread; the call waits for it (backoff 1, 2, 4... 16 ms)
//   inside its deadline, without using the redirect budget. So does a call whose slot
//   the map read so far leaves without a primary (a cluster still forming after a
//   degraded start): it waits for the refresh it requests, as for CLUSTERDOWN. With
//   no map at all (no seed ever answered) a call fails at once.
// - Refreshes run on one background thread: requests while one is pending collapse
//   into it, and consecutive refreshes are at least kMinRefreshGap apart. Connecting
//   to a new primary (blocking, connect_timeout) happens there, never on a caller's or
//   an I/O thread.
// - Callbacks run on the I/O thread of the node that answered, on the retry timer's
//   thread, or inline on an immediate failure (Router contract).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis/cluster_slots.h"
#include "redis/router.h"

namespace sluice::redis {

// Counters of the cluster routing. Monotonic.
struct ClusterStats {
  std::uint64_t moved = 0;        // MOVED replies followed
  std::uint64_t ask = 0;          // ASK replies followed
  std::uint64_t retries = 0;      // TRYAGAIN / CLUSTERDOWN / LOADING / READONLY resends
  std::uint64_t refreshes = 0;    // slot map refreshes done
  std::uint64_t unreachable = 0;  // calls failed at once: their primary had no connection
};

class ClusterRouter final : public Router {
 public:
  static constexpr int kMaxRedirects = 5;
  static constexpr std::chrono::milliseconds kMinRefreshGap{100};

  // `options.connect.url()` lists the seed nodes (Url::endpoints). Asks the seeds in
  // order for the slot map, then connects to every primary (each bounded by
  // connect_timeout). Errors: InvalidArgument when a seed answers but is not a cluster
  // node (cluster support disabled) or its cluster does not serve every slot;
  // otherwise the error of the last seed or primary that could not be reached. With
  // `options.connect_now` false (degraded start), kUnavailable is not an error: the
  // router starts without a map (calls fail at once with kUnavailable) and reads it in
  // the background until it can.
  static Result<std::unique_ptr<ClusterRouter>> Create(NodeOptions options);
  // Stops the background threads, fails retries waiting for their turn with
  // kUnavailable, then closes every node (failing what is in flight).
  ~ClusterRouter() override;
  ClusterRouter(const ClusterRouter&) = delete;
  ClusterRouter& operator=(const ClusterRouter&) = delete;

  void Send(std::string_view routing_key, Command command, Deadline deadline,
            ReplyCallback done) override;
  void ForEachPrimary(const std::function<void(NodeClient&)>& fn) override;
  const ConnectionStats& stats() const override { return *stats_; }
  std::string Describe() const override;

  ClusterStats cluster_stats() const;
  // Asks the background thread for a slot map refresh (collapsed with a pending one).
  void RequestRefresh();

 private:
  static constexpr int kMaxNodes = 1024;
  struct Node {
    Endpoint endpoint;
    std::atomic<NodeClient*> client{nullptr};  // null until connected (refresh thread)
    std::unique_ptr<NodeClient> owned;         // guarded by nodes_mu_
  };
  struct Call {
    int slot = 0;
    std::string wire;
    std::string_view script;
    CoalesceInfo coalesce;
    std::string module_wire;  // the native module's command (Command::module_wire)
    Deadline deadline;
    ReplyCallback done;
    int redirects = 0;
    int waits = 0;  // resends waiting for a node's first connection or the slot's owner
    bool script_reloaded = false;  // NOSCRIPT answered once: loaded and resent
  };
  struct Retry {
    std::shared_ptr<Call> call;
    int node = -1;  // -1: the slot's current owner
    bool asking = false;
  };

  explicit ClusterRouter(NodeOptions options);
  // Fetches the slot map and connects to every primary it names (blocking). With
  // `for_create`, errors are returned instead of being retried later.
  Status Refresh(bool for_create);
  Result<SlotMap> FetchMap(Deadline deadline, bool* not_cluster, std::string* why);
  NodeOptions OptionsFor(const Endpoint& e) const;
  // The index of the node at `e`, added (without a client) when new; -1 when full.
  int NodeIndex(const Endpoint& e);
  NodeClient* ClientOf(int index) const;

  void Dispatch(std::shared_ptr<Call> call, int node, bool asking);
  void OnReply(const std::shared_ptr<Call>& call, int node, const Status& s, const redisReply* r);
  // Resends after `delay` (or, if the deadline does not allow it, hands `r` to the
  // caller now). Called from a reply callback.
  void RetryLater(const std::shared_ptr<Call>& call, int node, std::chrono::microseconds delay,
                  const Status& s, const redisReply* r);
  // Queues the call for the timer thread after `delay`; false (nothing queued) when the
  // deadline would pass first or the router is stopping.
  bool Schedule(const std::shared_ptr<Call>& call, int node, bool asking,
                std::chrono::microseconds delay);
  void RefreshLoop();
  void TimerLoop();

  NodeOptions options_;
  std::shared_ptr<ConnectionStats> stats_ = std::make_shared<ConnectionStats>();

  std::array<std::atomic<Node*>, kMaxNodes> nodes_{};
  std::atomic<int> node_count_{0};
  std::mutex nodes_mu_;  // adding nodes; connecting clients
  std::vector<std::unique_ptr<Node>> owned_nodes_;
  std::array<std::atomic<std::uint16_t>, kClusterSlots> owner_;

  std::atomic<std::uint64_t> unreachable_{0};
  std::atomic<bool> closing_{
      false};  // the destructor runs: resend nothing  // the rest lives in stats_

  std::mutex mu_;  // the two background threads' state
  std::condition_variable refresh_cv_, timer_cv_;
  bool stop_ = false;
  bool refresh_requested_ = false;
  std::multimap<Deadline, Retry> timers_;
  std::thread refresher_, timer_;
};

}  // namespace sluice::redis
