// A real Sentinel group for tests: one primary, one replica (REPLICAOF) and three
// sentinels (`redis-server CONFIG --sentinel`), each on a free loopback port in its own
// temporary directory, all stopped and removed when the object is destroyed.
//
//   auto group = sluice::testing::RedisSentinelGroup::Start();
//   ASSERT_TRUE(group.ok()) << group.status().ToString();   // missing binary: fails
//   auto store = sluice::RedisStore::Create({.url = (*group)->Url()});
//
// Start returns once the group is healthy (WaitHealthy): every sentinel reports the same
// primary, sees the replica and the two other sentinels, and the replica is in sync
// (each condition polled, with a generous bound). Each sentinel starts knowing the
// replica and the other two (their run ids are set in the configurations), so Start
// does not wait for Sentinel's hello messages; Sentinel's INFO and hello periods stay
// the defaults (SLUICE_SENTINEL_FAST=1 shortens them with SENTINEL DEBUG).
// When a wait fails, the group's directory (every server's log) is kept and named in
// the error.
// Fault helpers wait for the outcome, not for time: Failover() (SENTINEL FAILOVER) and
// KillPrimary() (SIGKILL) return when every sentinel reports the new primary and that
// node's ROLE is master. Like RedisServer, call Start and the fault helpers from a
// long-lived thread (the processes die with the thread that forked them).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "redis_server.h"
#include "sluice/status.h"
#include "tls_certs.h"

namespace sluice::testing {

struct RedisSentinelGroupOptions {
  std::string master_name = "sluice-primary";
  // requirepass (and masterauth) of the primary and the replica; the sentinels get it
  // as `sentinel auth-pass`.
  std::string password;
  // requirepass of the sentinels themselves (the URL's sentinel_password).
  std::string sentinel_password;
  // How long a primary must be unreachable before a sentinel marks it down.
  int down_after_ms = 1000;
  // Sentinel's failover-timeout (also the delay before retrying a failed failover).
  int failover_timeout_ms = 3000;
  // Bound on each wait of Start (and of WaitHealthy).
  int start_timeout_ms = 60'000;
  // Extra arguments for both data nodes.
  std::vector<std::string> node_args;
  // Extra arguments for the first primary only (after node_args), so that the node a
  // failover promotes can differ from it: e.g. --loadmodule on the primary alone.
  std::vector<std::string> primary_args;
  // When set (it must outlive the group): the data nodes and the sentinels also serve
  // TLS (server.crt, no client certificate needed) on ports of their own, with
  // `tls-replication yes` everywhere, so replication, the sentinels' monitoring and
  // their hello messages all run over TLS and the sentinels report TLS ports. The
  // plain ports stay open for the fixture's own commands.
  const TestCerts* tls = nullptr;
};

class RedisSentinelGroup {
 public:
  static Result<std::unique_ptr<RedisSentinelGroup>> Start(RedisSentinelGroupOptions options = {});
  ~RedisSentinelGroup();
  RedisSentinelGroup(const RedisSentinelGroup&) = delete;
  RedisSentinelGroup& operator=(const RedisSentinelGroup&) = delete;

  const std::string& master_name() const { return options_.master_name; }
  // redis-sentinel://[:password@]127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/MASTER_NAME
  // (with ?sentinel_password=… when the sentinels have one).
  std::string Url() const;
  std::vector<int> sentinel_ports() const;
  // rediss-sentinel://…sentinel TLS ports…/MASTER_NAME?tls_ca=<ca.crt> (+ "&" + `query`).
  // Empty without RedisSentinelGroupOptions::tls.
  std::string TlsUrl(const std::string& query = "") const;
  // The data node the fixture last saw promoted (by Start, Failover or KillPrimary).
  RedisServer& primary() { return *nodes_[primary_]; }
  RedisServer& replica() { return *nodes_[1 - primary_]; }

  // One command to sentinel `index` (0-2) on a fresh connection, bounded by 5 s.
  Result<redis::Reply> SentinelCommand(int index, const std::vector<std::string>& args) const;
  // The primary's port as sentinel `index` reports it (get-master-addr-by-name).
  Result<int> ReportedPrimaryPort(int index) const;

  // SENTINEL FAILOVER; returns when every sentinel reports the other node as primary
  // and its ROLE is master (bounded by `timeout_ms`).
  Status Failover(int timeout_ms = 60'000);
  // SIGKILL of the primary; returns when every sentinel reports the replica as the
  // new primary and its ROLE is master. The killed node stays down until
  // RestartOldPrimary().
  Status KillPrimary(int timeout_ms = 60'000);
  // Starts the killed node again (empty); the sentinels make it a replica.
  Status RestartOldPrimary();
  // Waits until every sentinel agrees on the primary and lists the replica as up, the replica is in
  // sync, and sees the other sentinels: the state Start returns in, needed before another failover.
  // The primary is whichever node the sentinels agree on, also after a failover they made
  // on their own (a loaded machine can leave a primary unanswered for down_after_ms):
  // primary() and replica() follow it.
  Status WaitHealthy(int timeout_ms = 60'000);

 private:
  RedisSentinelGroup() = default;
  Status LaunchSentinel(int index);
  Status WaitPrimaryReported(int node, int timeout_ms);
  Status TuneSentinel(int port) const;
  std::string HealthProblem(int* agreed) const;
  // The port the sentinels know data node i by: its TLS port with TLS, else its port.
  int DataPort(int node) const;

  RedisSentinelGroupOptions options_;
  std::string dir_;
  std::unique_ptr<RedisServer> nodes_[2];
  int primary_ = 0;  // index into nodes_
  int killed_ = -1;  // index into nodes_ of a node KillPrimary stopped
  int sentinel_port_[3] = {0, 0, 0};
  std::string sentinel_id_[3];  // `sentinel myid`: each knows the others by it
  int sentinel_tls_port_[3] = {0, 0, 0};
  int node_tls_port_[2] = {0, 0};
  pid_t sentinel_pid_[3] = {-1, -1, -1};
  bool keep_dir_ = false;  // a wait failed: the logs stay for whoever reads the error
};

}  // namespace sluice::testing
