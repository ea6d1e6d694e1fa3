// `sluice check` and `sluice bench` on a Sentinel group, check's bad input, and an ACL user without
// EVALSHA: the built binary against real servers. Errors exit 3 with a message that
// says what is wrong, within --connect-timeout.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "gtest/gtest.h"
#include "redis_sentinel.h"
#include "redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Scheduling slack on a loaded 2-core machine.
constexpr auto kMargin = milliseconds(1500);

struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
  milliseconds took{0};
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Outcome Sluice(const std::vector<std::string>& args) {
  char dir[] = "/tmp/sluice-cli-sentinel.XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  std::vector<std::string> storage = {SLUICE_CLI_BIN};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome r;
  r.took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - start);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir);
  return r;
}

std::string Describe(const Outcome& r) {
  return "exit " + std::to_string(r.rc) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

// `sluice check` on `url`. The refusals below must come within the 500 ms default: they
// are answers, not timeouts. A check that should succeed gets a generous bound instead (a
// loaded machine may take longer to connect and load the scripts).
std::vector<std::string> Check(const std::string& url, const std::string& connect = "500ms") {
  return {"check", "--key", "user:1", "--rate", "5/min", "--redis", url, "--connect-timeout",
          connect};
}

int RefusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(CliSentinel, ChecksThroughTheSentinelsAndNamesBadInput) {
  testing::RedisSentinelGroupOptions go;
  go.password = "node-secret";
  go.sentinel_password = "sentinel-secret";
  auto group = testing::RedisSentinelGroup::Start(go);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  const std::string url = (*group)->Url();

  Outcome ok = Sluice(Check(url, "5s"));
  EXPECT_EQ(ok.rc, 0) << Describe(ok);
  EXPECT_NE(ok.out.find("allowed: 4 of 5 left"), std::string::npos) << ok.out;
  // `sluice bench` over redis-sentinel:// decides on the primary.
  testing::CliOutcome bench = testing::RunBench(SLUICE_CLI_BIN, url);
  EXPECT_EQ(testing::BenchProblems(bench), "") << bench.Describe();

  // The master name the sentinels do not know.
  std::string unknown = url;
  unknown.replace(unknown.find("/sluice-primary"), 15, "/nope");
  Outcome u = Sluice(Check(unknown));
  EXPECT_EQ(u.rc, 3) << Describe(u);
  EXPECT_NE(u.err.find("does not know a master named 'nope'"), std::string::npos) << u.err;
  EXPECT_LT(u.took, milliseconds(500) + kMargin);

  // Wrong sentinel password.
  std::string wrong = url;
  wrong.replace(wrong.find("sentinel-secret"), 15, "bad");
  Outcome w = Sluice(Check(wrong));
  EXPECT_EQ(w.rc, 3) << Describe(w);
  EXPECT_NE(w.err.find("sentinel_password"), std::string::npos) << w.err;

  // No sentinel listening.
  const std::string none = "redis-sentinel://127.0.0.1:" + std::to_string(RefusedPort()) +
                           ",127.0.0.1:" + std::to_string(RefusedPort()) + "/sluice-primary";
  Outcome n = Sluice(Check(none));
  EXPECT_EQ(n.rc, 3) << Describe(n);
  EXPECT_NE(n.err.find("no sentinel gave the address"), std::string::npos) << n.err;
  EXPECT_LT(n.took, milliseconds(500) + kMargin);
}

TEST(CliAcl, AUserWithoutEvalshaExits3) {
  auto server = testing::RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto r = (*server)->Command({"ACL", "SETUSER", "sluice", "on", ">pw", "~sluice:*", "+ping",
                               "+script|load", "+config|get", "+get", "+set", "+time"});
  ASSERT_TRUE(r.ok() && !r->is_error());
  const std::string url = "redis://sluice:pw@127.0.0.1:" + std::to_string((*server)->port());
  Outcome o = Sluice(Check(url));
  EXPECT_EQ(o.rc, 3) << Describe(o);
  EXPECT_NE(o.err.find("evalsha"), std::string::npos) << o.err;
  EXPECT_LT(o.took, milliseconds(500) + kMargin);
}

}  // namespace
}  // namespace sluice
