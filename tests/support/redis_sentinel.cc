#include "redis_sentinel.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "wait.h"

namespace sluice::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polling a real process for a state change, not waiting for time to pass.

// One command on a fresh connection to 127.0.0.1:port (AUTH first when `password`).
Result<redis::Reply> CommandAt(int port, const std::string& password,
                               const std::vector<std::string>& args) {
  const timeval tv{5, 0};
  redisContext* raw = redisConnectWithTimeout("127.0.0.1", port, tv);
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(raw, [](redisContext* p) {
    if (p != nullptr) redisFree(p);
  });
  if (!c || c->err) {
    return Status::Unavailable("cannot connect to 127.0.0.1:" + std::to_string(port) + ": " +
                               (c ? c->errstr : "out of memory"));
  }
  redisSetTimeout(c.get(), tv);
  auto run = [&](const std::vector<std::string>& a) -> Result<redis::Reply> {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& s : a) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) {
      return Status::Unavailable("command to 127.0.0.1:" + std::to_string(port) +
                                 " failed: " + c->errstr);
    }
    redis::Reply out = redis::Reply::From(*r);
    freeReplyObject(r);
    return out;
  };
  if (!password.empty()) {
    auto auth = run({"AUTH", password});
    if (!auth.ok()) return auth.status();
    if (auth->is_error()) return Status::InvalidArgument("AUTH failed: " + auth->str);
  }
  return run(args);
}

// A field of a flat [name, value, name, value...] reply (SENTINEL replicas/sentinels).
std::string Field(const redis::Reply& entry, std::string_view name) {
  for (std::size_t i = 0; i + 1 < entry.elements.size(); i += 2) {
    if (entry.elements[i].str == name) return entry.elements[i + 1].str;
  }
  return "";
}

// A Sentinel run id: 40 hex digits (`sentinel myid`).
std::string RandomRunId() {
  std::random_device seed;
  std::mt19937_64 bits(static_cast<std::uint64_t>(seed()) << 32 | seed());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(40, '0');
  for (char& c : id) c = kHex[bits() % 16];
  return id;
}

bool FlagsHealthy(const std::string& flags) {
  return flags.find("s_down") == std::string::npos && flags.find("o_down") == std::string::npos &&
         flags.find("disconnected") == std::string::npos;
}

}  // namespace

Result<std::unique_ptr<RedisSentinelGroup>> RedisSentinelGroup::Start(
    RedisSentinelGroupOptions options) {
  std::unique_ptr<RedisSentinelGroup> g(new RedisSentinelGroup());
  g->options_ = std::move(options);
  char tmpl[] = "/tmp/sluice-sentinel-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal(std::string("mkdtemp: ") + strerror(errno));
  g->dir_ = tmpl;

  // Both nodes carry masterauth, so either can replicate from the other after a failover.
  RedisServerOptions node;
  node.password = g->options_.password;
  node.args = g->options_.node_args;
  if (!node.password.empty()) {
    node.args.insert(node.args.end(), {"--masterauth", node.password});
  }
  auto with_tls = [&](int i) -> Result<RedisServerOptions> {
    RedisServerOptions o = node;
    if (g->options_.tls == nullptr) return o;
    auto port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    g->node_tls_port_[i] = *port;
    for (const std::string& a : g->options_.tls->ServerArgs(*port)) o.args.push_back(a);
    o.args.insert(o.args.end(), {"--tls-replication", "yes"});
    return o;
  };
  auto primary_options = with_tls(0);
  if (!primary_options.ok()) return primary_options.status();
  for (const std::string& a : g->options_.primary_args) primary_options->args.push_back(a);
  auto primary = RedisServer::Start(*primary_options);
  if (!primary.ok()) return primary.status();
  g->nodes_[0] = std::move(*primary);
  node.args.insert(node.args.end(), {"--replicaof", "127.0.0.1", std::to_string(g->DataPort(0))});
  auto replica_options = with_tls(1);
  if (!replica_options.ok()) return replica_options.status();
  auto replica = RedisServer::Start(*replica_options);
  if (!replica.ok()) return replica.status();
  g->nodes_[1] = std::move(*replica);

  // The sentinels discover the replica from the primary's INFO: let it attach first.
  const auto deadline = Clock::now() + milliseconds(g->options_.start_timeout_ms);
  std::string why = "no answer";
  for (;;) {
    auto info = g->nodes_[1]->Command({"INFO", "replication"});
    if (info.ok() && info->str.find("master_link_status:up") != std::string::npos) break;
    why = info.ok() ? info->str : info.status().message();
    if (Clock::now() > deadline) {
      return Status::Unavailable("the replica did not attach to the primary within " +
                                 std::to_string(g->options_.start_timeout_ms) + " ms: " + why);
    }
    std::this_thread::sleep_for(kServerPoll);
  }

  // Each sentinel's configuration names its own run id, the replica and the two other
  // sentinels (what Sentinel writes there itself once it has met them), so the group is
  // whole as soon as the sentinels connect, instead of after the hello messages (every
  // 2 s) and INFO refreshes that would introduce them. A sentinel whose port had to
  // change is still found by its hellos.
  for (int i = 0; i < 3; ++i) {
    auto port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    g->sentinel_port_[i] = *port;
    if (g->options_.tls != nullptr) {
      auto tls_port = FreeLoopbackPort();
      if (!tls_port.ok()) return tls_port.status();
      g->sentinel_tls_port_[i] = *tls_port;
    }
    g->sentinel_id_[i] = RandomRunId();
  }
  for (int i = 0; i < 3; ++i) {
    if (Status s = g->LaunchSentinel(i); !s.ok()) return s;
  }
  if (Status s = g->WaitHealthy(g->options_.start_timeout_ms); !s.ok()) return s;
  return g;
}

Status RedisSentinelGroup::LaunchSentinel(int index) {
  const std::string dir = dir_ + "/sentinel" + std::to_string(index);
  std::filesystem::create_directories(dir);
  const std::string& name = options_.master_name;
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {  // the free port may be taken meanwhile
    if (attempt > 0) {
      auto fresh = FreeLoopbackPort();
      if (!fresh.ok()) return fresh.status();
      sentinel_port_[index] = *fresh;
    }
    const int port = sentinel_port_[index];
    // Sentinel rewrites its configuration file, so it gets one of its own.
    const std::string conf = dir + "/sentinel.conf";
    {
      std::ofstream f(conf, std::ios::trunc);
      f << "port " << port << "\nbind 127.0.0.1\ndaemonize no\n"
        << "dir " << dir << "\nlogfile " << dir << "/sentinel.log\n"
        << "sentinel monitor " << name << " 127.0.0.1 " << DataPort(0) << " 2\n"
        << "sentinel down-after-milliseconds " << name << " " << options_.down_after_ms << "\n"
        << "sentinel failover-timeout " << name << " " << options_.failover_timeout_ms << "\n"
        << "sentinel parallel-syncs " << name << " 1\n"
        << "sentinel myid " << sentinel_id_[index] << "\n"
        << "sentinel known-replica " << name << " 127.0.0.1 " << DataPort(1) << "\n";
      for (int j = 0; j < 3; ++j) {
        // With TLS the sentinels reach each other on their TLS ports.
        const int other = options_.tls != nullptr ? sentinel_tls_port_[j] : sentinel_port_[j];
        if (j != index) {
          f << "sentinel known-sentinel " << name << " 127.0.0.1 " << other << " "
            << sentinel_id_[j] << "\n";
        }
      }
      if (!options_.password.empty()) {
        f << "sentinel auth-pass " << name << " " << options_.password << "\n";
      }
      if (!options_.sentinel_password.empty()) {
        f << "requirepass " << options_.sentinel_password << "\n";
      }
      if (options_.tls != nullptr) {
        if (sentinel_tls_port_[index] == 0) {
          auto tls_port = FreeLoopbackPort();
          if (!tls_port.ok()) return tls_port.status();
          sentinel_tls_port_[index] = *tls_port;
        }
        const std::vector<std::string> a = options_.tls->ServerArgs(sentinel_tls_port_[index]);
        for (std::size_t i = 0; i + 1 < a.size(); i += 2) {
          f << a[i].substr(2) << " " << a[i + 1] << "\n";  // "--tls-port", "N" -> "tls-port N"
        }
        f << "tls-replication yes\n";
      }
      if (!f) return Status::Internal("cannot write " + conf);
    }
    std::string binary = "redis-server";
    std::vector<std::string> args = {binary, conf, "--sentinel"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Status::Internal(std::string("fork: ") + strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the test process, whatever happens
      if (getppid() != parent) _exit(1);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    sentinel_pid_[index] = pid;
    const auto deadline = Clock::now() + milliseconds(options_.start_timeout_ms);
    std::string why = "no answer";
    bool up = false;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        sentinel_pid_[index] = -1;
        why = "exited with status " + std::to_string(status) + " (see " + dir + "/sentinel.log)";
        break;
      }
      auto r = CommandAt(port, options_.sentinel_password, {"PING"});
      if (r.ok() && !r->is_error()) {
        up = true;
        break;
      }
      why = r.ok() ? r->str : r.status().message();
      std::this_thread::sleep_for(milliseconds(20));
    }
    if (up) return TuneSentinel(port);
    if (sentinel_pid_[index] > 0) {
      kill(sentinel_pid_[index], SIGKILL);
      waitpid(sentinel_pid_[index], nullptr, 0);
      sentinel_pid_[index] = -1;
    }
    last = Status::Unavailable("sentinel " + std::to_string(index) + " on port " +
                               std::to_string(port) + " did not start: " + why);
  }
  return last;
}

// Sentinel refreshes each instance's INFO every 10 s and says hello every 2 s: the
// group would wait that long to see a replica, convert a demoted primary or learn a new
// configuration. SENTINEL DEBUG (Redis 7) shortens both periods; what the sentinels do
// stays the same, only sooner. Off unless SLUICE_SENTINEL_FAST is set: with the short
// periods the sentinel drills failed under CI's CPU load (.ci/run's drills x5 step, two
// of them, in three of three runs), with the default periods they passed.
Status RedisSentinelGroup::TuneSentinel(int port) const {
  if (std::getenv("SLUICE_SENTINEL_FAST") == nullptr) return Status::Ok();
  auto r = CommandAt(port, options_.sentinel_password,
                     {"SENTINEL", "DEBUG", "info-period", "1000", "publish-period", "500"});
  if (!r.ok()) return r.status();
  if (r->is_error())
    return Status::Internal("SENTINEL DEBUG on port " + std::to_string(port) +
                            " answered: " + r->str + " (Redis 7 needed)");
  return Status::Ok();
}

RedisSentinelGroup::~RedisSentinelGroup() {
  // Sentinels first, so they do not react to the data nodes going away.
  for (pid_t& pid : sentinel_pid_) {
    if (pid <= 0) continue;
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
  }
  nodes_[0].reset();
  nodes_[1].reset();
  std::error_code ec;
  if (!dir_.empty() && !keep_dir_) std::filesystem::remove_all(dir_, ec);
}

std::string RedisSentinelGroup::Url() const {
  std::string url = "redis-sentinel://";
  if (!options_.password.empty()) url += ":" + options_.password + "@";
  for (int i = 0; i < 3; ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(sentinel_port_[i]);
  }
  url += "/" + options_.master_name;
  if (!options_.sentinel_password.empty()) {
    url += "?sentinel_password=" + options_.sentinel_password;
  }
  return url;
}

std::string RedisSentinelGroup::TlsUrl(const std::string& query) const {
  if (options_.tls == nullptr) return "";
  std::string url = "rediss-sentinel://";
  if (!options_.password.empty()) url += ":" + options_.password + "@";
  for (int i = 0; i < 3; ++i) {
    if (i > 0) url += ",";
    url += "127.0.0.1:" + std::to_string(sentinel_tls_port_[i]);
  }
  url += "/" + options_.master_name + "?tls_ca=" + options_.tls->Path("ca.crt");
  if (!options_.sentinel_password.empty()) {
    url += "&sentinel_password=" + options_.sentinel_password;
  }
  if (!query.empty()) url += "&" + query;
  return url;
}

int RedisSentinelGroup::DataPort(int node) const {
  return options_.tls != nullptr ? node_tls_port_[node] : nodes_[node]->port();
}

std::vector<int> RedisSentinelGroup::sentinel_ports() const {
  return {sentinel_port_[0], sentinel_port_[1], sentinel_port_[2]};
}

Result<redis::Reply> RedisSentinelGroup::SentinelCommand(
    int index, const std::vector<std::string>& args) const {
  if (index < 0 || index > 2) return Status::InvalidArgument("sentinel index must be 0-2");
  return CommandAt(sentinel_port_[index], options_.sentinel_password, args);
}

Result<int> RedisSentinelGroup::ReportedPrimaryPort(int index) const {
  auto r = SentinelCommand(index, {"SENTINEL", "get-master-addr-by-name", options_.master_name});
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::Unavailable("sentinel answered: " + r->str);
  if (r->elements.size() != 2) return Status::NotFound("sentinel does not know the primary");
  return std::atoi(r->elements[1].str.c_str());
}

// Every sentinel reports nodes_[node] as primary, and that node says it is master.
Status RedisSentinelGroup::WaitPrimaryReported(int node, int timeout_ms) {
  const int want = DataPort(node);
  const auto deadline = Clock::now() + milliseconds(timeout_ms);
  std::string why;
  for (;;) {
    why.clear();
    for (int i = 0; i < 3 && why.empty(); ++i) {
      auto port = ReportedPrimaryPort(i);
      if (!port.ok()) {
        why = "sentinel " + std::to_string(i) + ": " + port.status().message();
      } else if (*port != want) {
        why = "sentinel " + std::to_string(i) + " reports port " + std::to_string(*port);
      }
    }
    if (why.empty()) {
      auto role = nodes_[node]->Command({"ROLE"});
      if (!role.ok() || role->elements.empty() || role->elements[0].str != "master") {
        why = "port " + std::to_string(want) + " is not master yet";
      }
    }
    if (why.empty()) {
      primary_ = node;
      return Status::Ok();
    }
    if (Clock::now() > deadline) {
      keep_dir_ = true;
      return Status::DeadlineExceeded(
          "port " + std::to_string(want) + " was not reported as the primary within " +
          std::to_string(timeout_ms) + " ms: " + why + " (logs kept in " + dir_ + ")");
    }
    std::this_thread::sleep_for(kServerPoll);
  }
}

// What keeps the group from being healthy ("" when it is), with the node every sentinel
// reports as primary in `*agreed`. The fixture follows that node rather than insisting on
// the one it last saw promoted: on a loaded machine the sentinels may fail over on their
// own (a primary unanswered for down_after_ms), and the group is healthy again after it.
std::string RedisSentinelGroup::HealthProblem(int* agreed) const {
  int reported = -1;
  for (int i = 0; i < 3; ++i) {
    auto port = ReportedPrimaryPort(i);
    const std::string who = "sentinel " + std::to_string(i);
    if (!port.ok()) return who + ": " + port.status().message();
    if (reported < 0) reported = *port;
    if (*port != reported) {
      return "sentinels disagree on the primary: sentinel 0 reports port " +
             std::to_string(reported) + ", " + who + " port " + std::to_string(*port);
    }
  }
  const int node = reported == DataPort(0) ? 0 : reported == DataPort(1) ? 1 : -1;
  if (node < 0 || node == killed_) {
    return "the sentinels report port " + std::to_string(reported) + ", not a running data node";
  }
  const int replica_port = DataPort(1 - node);
  for (int i = 0; i < 3; ++i) {
    const std::string who = "sentinel " + std::to_string(i);
    auto replicas = SentinelCommand(i, {"SENTINEL", "replicas", options_.master_name});
    bool replica_ok = false;
    if (replicas.ok()) {
      for (const redis::Reply& r : replicas->elements) {
        // Sentinel's view of the replica's link lags its INFO refresh; the link itself
        // is checked on the replica below.
        if (Field(r, "port") == std::to_string(replica_port) && FlagsHealthy(Field(r, "flags"))) {
          replica_ok = true;
        }
      }
    }
    if (!replica_ok) return who + " does not see replica " + std::to_string(replica_port) + " up";
    auto others = SentinelCommand(i, {"SENTINEL", "sentinels", options_.master_name});
    int healthy = 0;
    if (others.ok()) {
      for (const redis::Reply& s : others->elements) {
        if (FlagsHealthy(Field(s, "flags"))) ++healthy;
      }
    }
    if (healthy < 2) return who + " sees " + std::to_string(healthy) + " of the 2 other sentinels";
  }
  auto role = nodes_[node]->Command({"ROLE"});
  if (!role.ok() || role->elements.empty() || role->elements[0].str != "master") {
    return "port " + std::to_string(reported) + " is reported as primary but is not master yet";
  }
  auto info = nodes_[1 - node]->Command({"INFO", "replication"});
  if (!info.ok() ||
      info->str.find("master_port:" + std::to_string(reported)) == std::string::npos ||
      info->str.find("master_link_status:up") == std::string::npos) {
    return "replica " + std::to_string(replica_port) + " is not in sync with primary " +
           std::to_string(reported);
  }
  *agreed = node;
  return "";
}

Status RedisSentinelGroup::WaitHealthy(int timeout_ms) {
  const auto deadline = Clock::now() + milliseconds(timeout_ms);
  for (;;) {
    int node = -1;
    const std::string why = HealthProblem(&node);
    if (why.empty()) {
      primary_ = node;
      return Status::Ok();
    }
    if (Clock::now() > deadline) {
      keep_dir_ = true;
      return Status::DeadlineExceeded("the sentinel group did not become healthy within " +
                                      std::to_string(timeout_ms) + " ms: " + why +
                                      " (logs kept in " + dir_ + ")");
    }
    std::this_thread::sleep_for(kServerPoll);
  }
}

Status RedisSentinelGroup::Failover(int timeout_ms) {
  const auto deadline = Clock::now() + milliseconds(timeout_ms);
  // NOGOODSLAVE / INPROG: the sentinel is not ready yet (e.g. its view of the replica
  // is being refreshed); ask again until the bound.
  for (;;) {
    auto r = SentinelCommand(0, {"SENTINEL", "FAILOVER", options_.master_name});
    if (r.ok() && !r->is_error()) break;
    const std::string why = r.ok() ? r->str : r.status().message();
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded("SENTINEL FAILOVER was refused until the bound: " + why);
    }
    std::this_thread::sleep_for(kServerPoll);
  }
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return WaitPrimaryReported(1 - primary_, static_cast<int>(std::max<long long>(left, 1)));
}

Status RedisSentinelGroup::KillPrimary(int timeout_ms) {
  if (killed_ >= 0) return Status::InvalidArgument("a node is already down");
  killed_ = primary_;
  nodes_[primary_]->Stop();
  return WaitPrimaryReported(1 - killed_, timeout_ms);
}

Status RedisSentinelGroup::RestartOldPrimary() {
  if (killed_ < 0) return Status::InvalidArgument("no node was killed");
  Status s = nodes_[killed_]->Restart();
  if (s.ok()) killed_ = -1;
  return s;
}

}  // namespace sluice::testing
