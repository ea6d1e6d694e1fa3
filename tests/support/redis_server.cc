#include "redis_server.h"

#include <arpa/inet.h>
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
#include <thread>

#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

bool BinaryExists(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string dir = p.substr(start, end - start);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  // Debian installs redis-server in /usr/bin; also look in sbin dirs.
  return access(("/usr/sbin/" + name).c_str(), X_OK) == 0;
}

}  // namespace

Result<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return Status::Internal(std::string("bind 127.0.0.1:0: ") + strerror(errno));
  }
  close(fd);
  return static_cast<int>(ntohs(a.sin_port));
}

std::string DefaultRedisServerBinary() {
  const char* configured = std::getenv("SLUICE_TEST_REDIS_SERVER");
  return configured != nullptr && *configured != '\0' ? configured : "redis-server";
}

Result<std::shared_ptr<Store>> OpenPatientStore(const std::string& url) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = kPatientCallTimeout;
  auto s = RedisStore::Create(std::move(o));
  if (!s.ok()) return s.status();
  return std::shared_ptr<Store>(std::move(*s));
}

Result<std::unique_ptr<RedisServer>> RedisServer::Start(RedisServerOptions options) {
  if (!BinaryExists(options.binary)) {
    return Status::NotFound("'" + options.binary +
                            "' not found: run scripts/deps.sh (it installs redis-server from "
                            "Debian 12 and valkey-server from bookworm-backports)");
  }
  std::unique_ptr<RedisServer> s(new RedisServer());
  s->options_ = std::move(options);
  char tmpl[] = "/tmp/sluice-redis-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal(std::string("mkdtemp: ") + strerror(errno));
  s->dir_ = tmpl;
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {  // the free port may be taken meanwhile
    auto port = s->options_.port != 0 ? Result<int>(s->options_.port) : FreeLoopbackPort();
    if (!port.ok()) return port.status();
    s->port_ = *port;
    last = s->Launch();
    if (last.ok()) return s;
  }
  return last;
}

Status RedisServer::Launch() {
  std::vector<std::string> args = {options_.binary,
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--daemonize",
                                   "no",
                                   "--dir",
                                   dir_,
                                   "--logfile",
                                   dir_ + "/redis.log",
                                   "--unixsocket",
                                   dir_ + "/redis.sock",
                                   "--unixsocketperm",
                                   "700"};
  // A replica's full sync starts at once, not after the 5 s Redis 7 waits by default for
  // more replicas to join it (seconds at every Sentinel and Cluster start and failover).
  args.insert(args.end(), {"--repl-diskless-sync-delay", "0"});
  if (!options_.password.empty()) {
    args.push_back("--requirepass");
    args.push_back(options_.password);
  }
  for (const std::string& a : options_.args) args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    // Die with the test process, whatever happens to it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.start_timeout_ms);
  std::string why = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("redis-server exited during startup (see " + dir_ +
                                 "/redis.log); exit status " + std::to_string(status));
    }
    auto r = Command({"PING"});
    if (r.ok()) {  // an answer (NOAUTH etc. too): a server is up on the port
      // ... but maybe another process's: a suite running beside this one can take the
      // port between FreeLoopbackPort and our bind, and the tests would then share (and
      // flush) its data. Only our child's process_id counts; else Start tries another
      // port.
      auto info = Command({"INFO", "server"});
      const std::string want = "process_id:" + std::to_string(pid_) + "\r";
      if (info.ok() && !info->is_error() && info->str.find("process_id:") != std::string::npos &&
          info->str.find(want) == std::string::npos) {
        Stop();
        return Status::Unavailable("port " + std::to_string(port_) +
                                   " is served by another process's redis-server");
      }
      return Status::Ok();
    }
    why = r.status().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling for readiness
  }
  Stop();
  return Status::Unavailable("redis-server on port " + std::to_string(port_) +
                             " did not answer PING within " +
                             std::to_string(options_.start_timeout_ms) + " ms: " + why);
}

RedisServer::~RedisServer() {
  Stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string RedisServer::Url() const {
  const std::string auth = options_.password.empty() ? "" : ":" + options_.password + "@";
  return "redis://" + auth + "127.0.0.1:" + std::to_string(port_);
}

std::string RedisServer::UnixUrl() const {
  return "unix://" + dir_ + "/redis.sock";
}

void RedisServer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

void RedisServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

Status RedisServer::Restart() {
  Stop();
  return Launch();
}

Result<redis::Reply> RedisServer::Command(const std::vector<std::string>& args) const {
  const timeval tv{5, 0};
  redis::ContextPtr c(redisConnectWithTimeout("127.0.0.1", port_, tv));
  if (!c || c->err) {
    return Status::Unavailable("cannot connect to 127.0.0.1:" + std::to_string(port_) + ": " +
                               (c ? c->errstr : "out of memory"));
  }
  redisSetTimeout(c.get(), tv);
  if (!options_.password.empty()) {
    redis::ReplyPtr auth(
        static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", options_.password.c_str())));
    if (!auth) return Status::Unavailable(std::string("AUTH failed: ") + c->errstr);
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redis::ReplyPtr r(static_cast<redisReply*>(
      redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!r) return Status::Unavailable(std::string("command failed: ") + c->errstr);
  return redis::Reply::From(*r);
}

long long RedisServer::CommandCalls(const std::string& command) const {
  auto info = Command({"INFO", "commandstats"});
  if (!info.ok()) return -1;
  const std::string tag = "cmdstat_" + command + ":calls=";
  const std::size_t at = info->str.find(tag);
  return at == std::string::npos ? 0 : std::stoll(info->str.substr(at + tag.size()));
}

int RedisServer::ConnectedClients() const {
  auto info = Command({"INFO", "clients"});
  if (!info.ok()) return -1;
  const std::string tag = "connected_clients:";
  const std::size_t at = info->str.find(tag);
  return at == std::string::npos ? -1 : std::atoi(info->str.c_str() + at + tag.size()) - 1;
}

}  // namespace sluice::testing
