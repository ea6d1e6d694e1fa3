// A real local Redis Cluster for tests: N primaries with R replicas each (default 3 +
// 3), every node a redis-server (redis_server.h) on a free loopback port with its own
// temporary directory and an explicit, free cluster-bus port, joined by
// `redis-cli --cluster create ... --cluster-replicas R --cluster-yes`.
//
//   auto cluster = sluice::testing::RedisCluster::Start();
//   ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();  // missing binary: fails
//   auto store = sluice::RedisStore::Create({.url = (*cluster)->Url()});
//
// Start returns once every node reports cluster_state:ok and every node agrees on the
// same slot -> primary map with every replica's link up (waited as events, bounded).
// Start from a long-lived thread (the nodes die with the thread that forked them).
//
// Faults: KillPrimary (kill -9, waits until a replica took its slots), Failover
// (CLUSTER FAILOVER on a replica, waits until the roles switched), Reshard (redis-cli
// --cluster reshard N slots between two primaries), ScriptFlush (one node), and
// RestartNode (a killed node rejoins as a replica).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "redis_server.h"
#include "sluice/status.h"
#include "tls_certs.h"

namespace sluice::testing {

struct RedisClusterOptions {
  int primaries = 3;
  int replicas_per_primary = 1;
  // cluster-node-timeout: how long until a silent node is marked failed.
  int node_timeout_ms = 1000;
  // Extra redis-server arguments for every node.
  std::vector<std::string> args;
  // Bound on the whole start (creation and agreement).
  int start_timeout_ms = 60'000;
  // When set (it must outlive the cluster), every node also serves TLS on a port of its
  // own (server.crt; clients need no certificate), with `tls-cluster yes` (the bus and
  // the ports the cluster announces to TLS clients) and `tls-replication yes`. The
  // plain ports stay open for the fixture's own commands.
  const TestCerts* tls = nullptr;
};

// One node as the cluster sees it (from CLUSTER NODES).
struct ClusterNodeInfo {
  std::string id;
  int port = 0;
  bool primary = false;
  std::string primary_id;  // for a replica
  int slots = 0;           // slots served (primaries)
  bool failed = false;     // flagged fail / pfail / noaddr / handshake
};

class RedisCluster {
 public:
  static Result<std::unique_ptr<RedisCluster>> Start(RedisClusterOptions options = {});
  // Kills every node and removes their directories.
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // redis-cluster://127.0.0.1:P1,127.0.0.1:P2,... (every node as a seed).
  std::string Url() const;
  // redis-cluster://127.0.0.1:P of one node only.
  std::string SeedUrl(std::size_t node) const;
  // rediss-cluster://127.0.0.1:T1,...?tls_ca=<ca.crt> (+ "&" + `query` when given):
  // every node's TLS port. Empty without RedisClusterOptions::tls.
  std::string TlsUrl(const std::string& query = "") const;
  // Node i's TLS port (0 without TLS).
  int tls_port(std::size_t i) const { return i < tls_ports_.size() ? tls_ports_[i] : 0; }

  std::size_t size() const { return nodes_.size(); }
  RedisServer& node(std::size_t i) { return *nodes_[i]; }
  bool alive(std::size_t i) const { return alive_[i]; }
  // Index of the node listening on `port`, or -1.
  int IndexOfPort(int port) const;

  // The cluster's view from the first live node (CLUSTER NODES), in node order of
  // this fixture (index i describes node(i); a node unknown to the view has id "").
  Result<std::vector<ClusterNodeInfo>> Nodes() const;
  // Current primary / replica indexes (from Nodes()).
  Result<std::vector<std::size_t>> Primaries() const;
  Result<std::vector<std::size_t>> Replicas() const;
  // The node serving `slot` / the slot of `key` (CLUSTER KEYSLOT on a live node).
  Result<std::size_t> PrimaryForSlot(int slot) const;
  Result<int> KeySlot(std::string_view key) const;

  // Sends a command to node i (see RedisServer::Command).
  Result<redis::Reply> Command(std::size_t i, const std::vector<std::string>& args) const;

  // Waits until every live node reports cluster_state:ok, all agree on the slot map
  // and the membership, nobody is flagged failed, and every replica's link is up.
  Status WaitHealthy(std::chrono::milliseconds bound = std::chrono::seconds(30)) const;

  // FLUSHALL on every live primary.
  Status FlushAll() const;

  // kill -9 of primary `i`; returns once one of its replicas serves its slots and the
  // surviving nodes agree (the killed node is then flagged failed; RestartNode brings
  // it back as a replica). Returns the index of the promoted replica.
  Result<std::size_t> KillPrimary(std::size_t i,
                                  std::chrono::milliseconds bound = std::chrono::seconds(30));
  // Starts a killed node again on its port with its nodes.conf: it rejoins (as a
  // replica of whoever took its slots). Waits until healthy.
  Status RestartNode(std::size_t i, std::chrono::milliseconds bound = std::chrono::seconds(30));

  // CLUSTER FAILOVER on replica `i`; returns once it is a primary, its old primary is
  // its replica, and the nodes agree.
  Status Failover(std::size_t i, std::chrono::milliseconds bound = std::chrono::seconds(30));

  // Moves `slots` slots from primary `from` to primary `to` with
  // `redis-cli --cluster reshard` (keys migrate with MIGRATE meanwhile). Blocks until
  // redis-cli is done and the nodes agree.
  Status Reshard(std::size_t from, std::size_t to, int slots,
                 std::chrono::milliseconds bound = std::chrono::seconds(120));

  // SCRIPT FLUSH on node i.
  Status ScriptFlush(std::size_t i) const;

 private:
  RedisCluster() = default;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<bool> alive_;
  std::vector<int> tls_ports_;
  RedisClusterOptions options_;
};

// Runs a program (found on PATH) with `args`, capturing stdout+stderr; kills it when
// `bound` passes. Returns the exit status (0 = success) and the output.
struct ProgramResult {
  int exit_code = -1;  // -1: killed at the bound / by a signal
  std::string output;
};
Result<ProgramResult> RunProgram(const std::vector<std::string>& args,
                                 std::chrono::milliseconds bound);

}  // namespace sluice::testing
