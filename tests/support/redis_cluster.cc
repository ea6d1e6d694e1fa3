#include "redis_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "wait.h"

namespace sluice::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Polling interval while waiting for the cluster to converge: the cluster has no
// event to subscribe to, so the waits poll its state, always under a bound.

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "field:value" from an INFO / CLUSTER INFO text.
std::string InfoField(const std::string& text, std::string_view field) {
  for (const std::string& line : Split(text, '\n')) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 &&
        line[field.size()] == ':') {
      std::string v = line.substr(field.size() + 1);
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      return v;
    }
  }
  return "";
}

struct ParsedNode {
  std::string id;
  int port = 0;
  bool primary = false;
  std::string primary_id;
  std::string slots;  // the slot ranges, canonical (migration markers dropped)
  int slot_count = 0;
  bool failed = false;
};

// Parses CLUSTER NODES text: "<id> <ip:port@cport[,host]> <flags> <master> <ping> <pong>
// <epoch> <link> <slot> <slot>...".
std::vector<ParsedNode> ParseNodes(const std::string& text) {
  std::vector<ParsedNode> out;
  for (const std::string& line : Split(text, '\n')) {
    std::vector<std::string> f = Split(line, ' ');
    if (f.size() < 8) continue;
    ParsedNode n;
    n.id = f[0];
    const std::string addr = f[1].substr(0, f[1].find('@'));
    const std::size_t colon = addr.rfind(':');
    if (colon != std::string::npos) n.port = std::atoi(addr.c_str() + colon + 1);
    for (const std::string& flag : Split(f[2], ',')) {
      if (flag == "master") n.primary = true;
      if (flag == "fail" || flag == "fail?" || flag == "handshake" || flag == "noaddr") {
        n.failed = true;
      }
    }
    if (f[3] != "-") n.primary_id = f[3];
    for (std::size_t i = 8; i < f.size(); ++i) {
      if (f[i].empty() || f[i][0] == '[') continue;  // [slot->-id] migration markers
      n.slots += f[i] + " ";
      const std::size_t dash = f[i].find('-');
      if (dash == std::string::npos) {
        n.slot_count += 1;
      } else {
        n.slot_count += std::atoi(f[i].c_str() + dash + 1) - std::atoi(f[i].c_str()) + 1;
      }
    }
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace

Result<ProgramResult> RunProgram(const std::vector<std::string>& args,
                                 std::chrono::milliseconds bound) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0)
    return Status::Internal(std::string("pipe: ") + strerror(errno));
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return Status::Internal(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(pipefd[1]);
  ProgramResult result;
  const auto deadline = Clock::now() + bound;
  bool killed = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = read(pipefd[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the program closed its output (exited)
    result.output.append(buf, static_cast<std::size_t>(n));
  }
  close(pipefd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!killed && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (killed) {
    result.output += "\n[killed after " + std::to_string(bound.count()) + " ms]";
  }
  return result;
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(RedisClusterOptions options) {
  if (options.primaries < 3) {
    return Status::InvalidArgument("a Redis Cluster needs at least 3 primaries");
  }
  std::unique_ptr<RedisCluster> c(new RedisCluster());
  c->options_ = options;
  const int total = options.primaries * (1 + options.replicas_per_primary);
  for (int i = 0; i < total; ++i) {
    Status last;
    std::unique_ptr<RedisServer> node;
    for (int attempt = 0; attempt < 3 && node == nullptr; ++attempt) {
      // The bus port is chosen explicitly: port + 10000 (the default) may be taken
      // or beyond 65535 for an ephemeral port.
      auto bus = FreeLoopbackPort();
      if (!bus.ok()) return bus.status();
      RedisServerOptions so;
      if (static_cast<std::size_t>(i) < options.ports.size()) {
        so.port = options.ports[static_cast<std::size_t>(i)];
      }
      so.args = {"--cluster-enabled", "yes", "--cluster-port", std::to_string(*bus),
                 "--cluster-node-timeout", std::to_string(options.node_timeout_ms),
                 // A replica may always take over, however long its link was down.
                 "--cluster-replica-validity-factor", "0"};
      for (const std::string& a : options.args) so.args.push_back(a);
      int tls_port = 0;
      if (options.tls != nullptr) {
        auto t = FreeLoopbackPort();
        if (!t.ok()) return t.status();
        tls_port = *t;
        for (const std::string& a : options.tls->ServerArgs(tls_port)) so.args.push_back(a);
        so.args.insert(so.args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
      }
      auto s = RedisServer::Start(std::move(so));
      if (s.ok()) {
        node = std::move(*s);
        if (tls_port != 0) c->tls_ports_.push_back(tls_port);
      } else {
        last = s.status();
        if (last.code() == ErrorCode::kNotFound) return last;
      }
    }
    if (node == nullptr) return last;
    c->nodes_.push_back(std::move(node));
    c->alive_.push_back(true);
  }
  std::vector<std::string> args = {"redis-cli", "--cluster", "create"};
  for (const auto& n : c->nodes_) args.push_back("127.0.0.1:" + std::to_string(n->port()));
  args.insert(args.end(), {"--cluster-replicas", std::to_string(options.replicas_per_primary),
                           "--cluster-yes"});
  const auto bound = std::chrono::milliseconds(options.start_timeout_ms);
  const auto started = Clock::now();
  auto created = RunProgram(args, bound);
  if (!created.ok()) return created.status();
  if (created->exit_code != 0) {
    return Status::Unavailable("redis-cli --cluster create failed (exit " +
                               std::to_string(created->exit_code) + "): " + created->output);
  }
  const auto left = std::max(
      std::chrono::milliseconds(1000),
      std::chrono::duration_cast<std::chrono::milliseconds>(bound - (Clock::now() - started)));
  if (Status s = c->WaitHealthy(left); !s.ok()) return s;
  return c;
}

RedisCluster::~RedisCluster() = default;

std::string RedisCluster::Url() const {
  std::string url = "redis-cluster://";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(nodes_[i]->port());
  }
  return url;
}

std::string RedisCluster::SeedUrl(std::size_t node) const {
  return "redis-cluster://127.0.0.1:" + std::to_string(nodes_[node]->port());
}

std::string RedisCluster::TlsUrl(const std::string& query) const {
  if (tls_ports_.empty()) return "";
  std::string url = "rediss-cluster://";
  for (std::size_t i = 0; i < tls_ports_.size(); ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(tls_ports_[i]);
  }
  url += "?tls_ca=" + options_.tls->Path("ca.crt");
  if (!query.empty()) url += "&" + query;
  return url;
}

int RedisCluster::IndexOfPort(int port) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port || tls_port(i) == port) return static_cast<int>(i);
  }
  return -1;
}

Result<redis::Reply> RedisCluster::Command(std::size_t i,
                                           const std::vector<std::string>& args) const {
  if (i >= nodes_.size()) return Status::InvalidArgument("no node " + std::to_string(i));
  return nodes_[i]->Command(args);
}

Result<std::vector<ClusterNodeInfo>> RedisCluster::Nodes() const {
  Status last = Status::Unavailable("no live node");
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!alive_[i]) continue;
    auto r = nodes_[i]->Command({"CLUSTER", "NODES"});
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    if (r->is_error()) {
      last = Status::Unavailable("CLUSTER NODES: " + r->str);
      continue;
    }
    std::vector<ClusterNodeInfo> out(nodes_.size());
    for (const ParsedNode& p : ParseNodes(r->str)) {
      const int index = IndexOfPort(p.port);
      if (index < 0) continue;
      ClusterNodeInfo& n = out[static_cast<std::size_t>(index)];
      n.id = p.id;
      n.port = p.port;
      n.primary = p.primary;
      n.primary_id = p.primary_id;
      n.slots = p.slot_count;
      n.failed = p.failed;
    }
    return out;
  }
  return last;
}

Result<std::vector<std::size_t>> RedisCluster::Primaries() const {
  auto nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    if ((*nodes)[i].primary && (*nodes)[i].slots > 0 && alive_[i]) out.push_back(i);
  }
  return out;
}

Result<std::vector<std::size_t>> RedisCluster::Replicas() const {
  auto nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    if (!(*nodes)[i].primary && alive_[i]) out.push_back(i);
  }
  return out;
}

Result<int> RedisCluster::KeySlot(std::string_view key) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!alive_[i]) continue;
    auto r = nodes_[i]->Command({"CLUSTER", "KEYSLOT", std::string(key)});
    if (!r.ok()) continue;
    if (r->is_error()) return Status::Internal("CLUSTER KEYSLOT: " + r->str);
    return static_cast<int>(r->integer);
  }
  return Status::Unavailable("no live node answered CLUSTER KEYSLOT");
}

Result<std::size_t> RedisCluster::PrimaryForSlot(int slot) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!alive_[i]) continue;
    auto r = nodes_[i]->Command({"CLUSTER", "SLOTS"});
    if (!r.ok() || r->is_error()) continue;
    for (const redis::Reply& range : r->elements) {
      if (range.elements.size() < 3) continue;
      if (slot >= range.elements[0].integer && slot <= range.elements[1].integer) {
        const int index = IndexOfPort(static_cast<int>(range.elements[2].elements[1].integer));
        if (index < 0) return Status::Internal("slot served by an unknown port");
        return static_cast<std::size_t>(index);
      }
    }
    return Status::NotFound("slot " + std::to_string(slot) + " is not served");
  }
  return Status::Unavailable("no live node answered CLUSTER SLOTS");
}

Status RedisCluster::WaitHealthy(std::chrono::milliseconds bound) const {
  const auto deadline = Clock::now() + bound;
  std::string why;
  for (;;) {
    why.clear();
    std::string reference;
    for (std::size_t i = 0; i < nodes_.size() && why.empty(); ++i) {
      if (!alive_[i]) continue;
      const std::string name =
          "node " + std::to_string(i) + " (port " + std::to_string(nodes_[i]->port()) + ")";
      auto info = nodes_[i]->Command({"CLUSTER", "INFO"});
      if (!info.ok() || info->is_error()) {
        why = name + ": CLUSTER INFO failed";
        break;
      }
      if (InfoField(info->str, "cluster_state") != "ok") {
        why = name + ": cluster_state " + InfoField(info->str, "cluster_state");
        break;
      }
      auto text = nodes_[i]->Command({"CLUSTER", "NODES"});
      if (!text.ok() || text->is_error()) {
        why = name + ": CLUSTER NODES failed";
        break;
      }
      std::vector<ParsedNode> parsed = ParseNodes(text->str);
      std::vector<std::string> lines;
      int covered = 0;
      bool me_replica = false;
      for (const ParsedNode& p : parsed) {
        const int index = IndexOfPort(p.port);
        if (index < 0) continue;
        if (alive_[static_cast<std::size_t>(index)] && p.failed) {
          why = name + " sees node " + std::to_string(index) + " as failed";
        }
        if (!alive_[static_cast<std::size_t>(index)] && p.slot_count > 0) {
          why = name + " still maps slots to dead node " + std::to_string(index);
        }
        if (p.port == nodes_[i]->port()) me_replica = !p.primary;
        covered += p.slot_count;
        if (!alive_[static_cast<std::size_t>(index)]) continue;  // a dead node's flags vary
        lines.push_back(p.id + " " + std::to_string(p.port) + (p.primary ? " M " : " S ") +
                        p.primary_id + " " + p.slots);
      }
      if (!why.empty()) break;
      if (covered != 16384) {
        why = name + " sees " + std::to_string(covered) + " slots covered";
        break;
      }
      std::sort(lines.begin(), lines.end());
      std::string view;
      for (const std::string& l : lines) view += l + "\n";
      if (reference.empty()) {
        reference = view;
      } else if (view != reference) {
        why = name + " disagrees:\n" + view + "vs\n" + reference;
        break;
      }
      if (me_replica) {
        auto repl = nodes_[i]->Command({"INFO", "replication"});
        if (!repl.ok() || repl->is_error() || InfoField(repl->str, "master_link_status") != "up") {
          why = name + ": replica link not up";
          break;
        }
      }
    }
    if (why.empty()) return Status::Ok();
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("cluster not healthy within " +
                                      std::to_string(bound.count()) + " ms: " + why);
    }
    std::this_thread::sleep_for(kServerPoll);  // polling the cluster's state, bounded above
  }
}

Status RedisCluster::FlushAll() const {
  auto primaries = Primaries();
  if (!primaries.ok()) return primaries.status();
  for (std::size_t i : *primaries) {
    auto r = nodes_[i]->Command({"FLUSHALL"});
    if (!r.ok()) return r.status();
    if (r->is_error()) return Status::Internal("FLUSHALL: " + r->str);
  }
  return Status::Ok();
}

Result<std::size_t> RedisCluster::KillPrimary(std::size_t i, std::chrono::milliseconds bound) {
  auto nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  if (i >= nodes_.size() || !alive_[i] || !(*nodes)[i].primary) {
    return Status::InvalidArgument("node " + std::to_string(i) + " is not a live primary");
  }
  const std::string id = (*nodes)[i].id;
  std::vector<std::size_t> replicas;
  for (std::size_t r = 0; r < nodes->size(); ++r) {
    if ((*nodes)[r].primary_id == id && alive_[r]) replicas.push_back(r);
  }
  if (replicas.empty()) return Status::InvalidArgument("primary has no live replica");
  nodes_[i]->Stop();
  alive_[i] = false;
  if (Status s = WaitHealthy(bound); !s.ok()) return s;
  auto after = Nodes();
  if (!after.ok()) return after.status();
  for (std::size_t r : replicas) {
    if ((*after)[r].primary && (*after)[r].slots > 0) return r;
  }
  return Status::Internal("healthy, but no replica of the killed primary serves slots");
}

Status RedisCluster::RestartNode(std::size_t i, std::chrono::milliseconds bound) {
  if (i >= nodes_.size() || alive_[i]) return Status::InvalidArgument("node is not stopped");
  if (Status s = nodes_[i]->Restart(); !s.ok()) return s;
  alive_[i] = true;
  return WaitHealthy(bound);
}

Status RedisCluster::Failover(std::size_t i, std::chrono::milliseconds bound) {
  auto nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  if (i >= nodes_.size() || !alive_[i] || (*nodes)[i].primary) {
    return Status::InvalidArgument("node " + std::to_string(i) + " is not a live replica");
  }
  const std::string old_primary = (*nodes)[i].primary_id;
  auto r = nodes_[i]->Command({"CLUSTER", "FAILOVER"});
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::Internal("CLUSTER FAILOVER: " + r->str);
  const auto deadline = Clock::now() + bound;
  for (;;) {
    auto now = Nodes();
    if (now.ok() && (*now)[i].primary && (*now)[i].slots > 0) {
      bool demoted = false;
      for (const ClusterNodeInfo& n : *now) {
        if (n.id == old_primary && !n.primary && n.primary_id == (*now)[i].id) demoted = true;
      }
      if (demoted) break;
    }
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("CLUSTER FAILOVER did not switch roles within " +
                                      std::to_string(bound.count()) + " ms");
    }
    std::this_thread::sleep_for(kServerPoll);  // polling the roles, bounded above
  }
  return WaitHealthy(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(deadline - Clock::now(), Clock::duration(std::chrono::seconds(1)))));
}

Status RedisCluster::Reshard(std::size_t from, std::size_t to, int slots,
                             std::chrono::milliseconds bound) {
  auto nodes = Nodes();
  if (!nodes.ok()) return nodes.status();
  if (from >= nodes_.size() || to >= nodes_.size() || !(*nodes)[from].primary ||
      !(*nodes)[to].primary) {
    return Status::InvalidArgument("reshard needs two primaries");
  }
  const auto deadline = Clock::now() + bound;
  // redis-cli refuses to reshard while the nodes disagree.
  if (Status s = WaitHealthy(bound); !s.ok()) return s;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  auto run = RunProgram(
      {"redis-cli", "--cluster", "reshard", "127.0.0.1:" + std::to_string(nodes_[from]->port()),
       "--cluster-from", (*nodes)[from].id, "--cluster-to", (*nodes)[to].id, "--cluster-slots",
       std::to_string(slots), "--cluster-yes"},
      std::max(left, std::chrono::milliseconds(1000)));
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::Internal(
        "redis-cli --cluster reshard failed (exit " + std::to_string(run->exit_code) +
        "): " + run->output.substr(run->output.size() > 2000 ? run->output.size() - 2000 : 0));
  }
  left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return WaitHealthy(std::max(left, std::chrono::milliseconds(1000)));
}

Status RedisCluster::ScriptFlush(std::size_t i) const {
  auto r = Command(i, {"SCRIPT", "FLUSH"});
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::Internal("SCRIPT FLUSH: " + r->str);
  return Status::Ok();
}

}  // namespace sluice::testing
