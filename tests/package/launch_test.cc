// How an operator launches sluiced (issue #13): --check-config against startup on every
// broken config, flag > environment > config file precedence, the Redis password file,
// --version. Through the real binary, with a real redis-server where Redis is involved.
#include "service/launch.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <regex>

#include "process.h"
#include "redis_server.h"
#include "service/config.h"

namespace sluice::testing {
namespace {

using service::EnvName;
using service::LoadConfig;
using service::ReadSecretFile;
using service::WithRedisPassword;

// Sets an environment variable for one scope; child processes inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

struct RunResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

// Runs sluiced to completion (bounded); -1 if it did not exit in time.
RunResult RunSluiced(const TempDir& dir, const std::vector<std::string>& args) {
  static int n = 0;
  const std::string log = dir.File("run" + std::to_string(++n) + ".log");
  std::vector<std::string> argv = {SLUICED_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Process::Spawn(argv, log);
  RunResult r;
  if (!p) return r;
  r.code = p->Wait(std::chrono::seconds(60));
  r.output = ReadFile(log);
  return r;
}

// The value of "  KEY: value" in --check-config's summary.
std::string SummaryField(const std::string& out, const std::string& key) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("\n  " + key + ": ([^\n]*)"))) return m[1];
  return "(no " + key + " in: " + out + ")";
}

// Waits for the `started` log line; returns the HTTP port, 0 if it exited or timed out.
int WaitStarted(Process& p, const std::string& log) {
  const std::regex started(R"(event=started .* http=127\.0\.0\.1:(\d+))");
  int port = 0;
  WaitFor([&] {
    std::smatch m;
    const std::string text = ReadFile(log);
    if (std::regex_search(text, m, started)) {
      port = std::stoi(m[1]);
      return true;
    }
    return !p.running();
  });
  return port;
}

// Every broken config of tests/service/config_test.cc, as files.
const std::vector<std::pair<std::string, std::string>> kBrokenConfigs = {
    {"typo_rate_limt", "domain: a\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n"},
    {"typo_burts",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
     "      requests_per_unit: 1\n      burts: 3\n"},
    {"typo_htp", "sluiced:\n  htp: 1.2.3.4:5\ndomain: a\n"},
    {"extra_top_level", "domain: a\nextra: 1\n"},
    {"invalid_yaml", "domain: a\ndescriptors:\n  - key: k\n    value: [unclosed\n"},
    {"bad_unit",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, "
     "requests_per_unit: 1}\n"},
    {"no_requests_per_unit",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n"},
    {"negative_requests",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
     "requests_per_unit: -3}\n"},
    {"bad_algorithm",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
     "requests_per_unit: 3, algorithm: magic}\n"},
    {"burst_on_window",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
     "requests_per_unit: 3, burst: 9}\n"},
    {"unlimited_with_unit",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n"},
    {"descriptor_without_key", "domain: a\ndescriptors:\n  - value: v\n"},
    {"bad_listen_address", "sluiced:\n  http: nonsense\ndomain: a\n"},
    {"too_many_descriptors", "sluiced:\n  max_descriptors: 17\ndomain: a\n"},
    {"no_domain", "sluiced: {}\n"},
    {"duplicate_descriptor",
     "domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n"},
    {"duplicate_domain", "domain: a\n---\ndomain: a\n"},
    {"policy_redefined",
     "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
     "requests_per_unit: 1, policy: p}\n  - key: j\n    rate_limit: {unit: second, "
     "requests_per_unit: 2, policy: p}\n"},
};

TEST(CheckConfig, EveryBrokenConfigExits1WithTheMessageStartupPrints) {
  TempDir dir;
  for (const auto& [name, yaml] : kBrokenConfigs) {
    SCOPED_TRACE(name);
    const std::string file = dir.File(name + ".yaml");
    WriteFile(file, yaml);
    auto loaded = LoadConfig(file);
    ASSERT_FALSE(loaded.ok()) << "config_test's broken config now loads";
    const std::string message = loaded.status().message();
    // FILE:LINE: why
    EXPECT_TRUE(std::regex_search(message, std::regex("^" + file + ":[0-9]+: ")) ||
                name == "no_domain")
        << message;

    const RunResult check = RunSluiced(dir, {"--check-config", file});
    EXPECT_EQ(check.code, 1) << check.output;
    EXPECT_NE(check.output.find("sluiced: " + message + "\n"), std::string::npos) << check.output;
    EXPECT_EQ(check.output.find(": OK"), std::string::npos) << check.output;

    const RunResult start =
        RunSluiced(dir, {"--config", file, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"});
    EXPECT_EQ(start.code, 1) << start.output;
    EXPECT_NE(start.output.find("sluiced: " + message + "\n"), std::string::npos) << start.output;
  }
}

TEST(CheckConfig, ValidConfigPrintsDomainsAndRulesWithoutContactingRedis) {
  TempDir dir;
  const std::string file = dir.File("ok.yaml");
  WriteFile(file,
            "sluiced:\n  http: 127.0.0.1:1\n  grpc: 127.0.0.1:1\n"
            "  redis: redis://127.0.0.1:1\n"  // nothing listens there: not contacted
            "domain: api\ndescriptors:\n"
            "  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
            "  - key: path\n    value: /login\n    descriptors:\n"
            "      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 5, "
            "algorithm: token_bucket, burst: 2}\n");
  const RunResult r = RunSluiced(dir, {"--check-config", file});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(file + ": OK\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("domain api"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[remote_address] -> 10/minute fixed_window"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[path=/login, user] -> 5/hour token_bucket burst 2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 domain(s), 2 limit(s)"), std::string::npos) << r.output;
  EXPECT_EQ(SummaryField(r.output, "store"), "redis://127.0.0.1:1");
}

TEST(CheckConfig, StoreUrlIsValidatedWithoutConnecting) {
  // The config parser accepts any store URL string; startup rejects a malformed one.
  TempDir dir;
  const std::string file = dir.File("url.yaml");
  WriteFile(file, "sluiced:\n  redis: redis://h:99999\ndomain: a\n");
  const RunResult r = RunSluiced(dir, {"--check-config", file});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("sluiced: bad Redis URL 'redis://h:99999'"), std::string::npos)
      << r.output;
}

TEST(Launch, VersionFromTheCMakeProject) {
  TempDir dir;
  const RunResult r = RunSluiced(dir, {"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.output, "sluiced " SLUICE_PROJECT_VERSION "\n");
}

TEST(Launch, ConfigIsRequiredFromFlagOrEnvironment) {
  TempDir dir;
  const RunResult r = RunSluiced(dir, {});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--config (or SLUICED_CONFIG) is required"), std::string::npos)
      << r.output;
}

TEST(Launch, FlagWinsOverEnvironmentWinsOverConfigFile) {
  TempDir dir;
  const std::string file = dir.File("p.yaml");
  WriteFile(file,
            "sluiced:\n  http: 127.0.0.1:1001\n  grpc: 127.0.0.1:1002\n"
            "  redis: redis://config-host:6379\ndomain: a\n");
  // The file alone.
  RunResult r = RunSluiced(dir, {"--check-config", file});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(SummaryField(r.output, "http"), "127.0.0.1:1001");
  EXPECT_EQ(SummaryField(r.output, "grpc"), "127.0.0.1:1002");
  EXPECT_EQ(SummaryField(r.output, "store"), "redis://config-host:6379");
  {
    ScopedEnv http("SLUICED_HTTP", "127.0.0.1:2001");
    ScopedEnv redis("SLUICED_REDIS", "redis://env-host:6379");
    ScopedEnv empty("SLUICED_GRPC", "");  // empty: as if unset (systemd's VAR=)
    r = RunSluiced(dir, {"--check-config", file});
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(SummaryField(r.output, "http"), "127.0.0.1:2001");
    EXPECT_EQ(SummaryField(r.output, "grpc"), "127.0.0.1:1002");
    EXPECT_EQ(SummaryField(r.output, "store"), "redis://env-host:6379");
    // Flags over both.
    r = RunSluiced(dir, {"--check-config", file, "--http", "127.0.0.1:3001", "--redis",
                         "redis://flag-host:6379"});
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(SummaryField(r.output, "http"), "127.0.0.1:3001");
    EXPECT_EQ(SummaryField(r.output, "store"), "redis://flag-host:6379");
  }
  {
    // A bad value from the environment names the variable.
    ScopedEnv bad("SLUICED_HTTP", "nonsense");
    r = RunSluiced(dir, {"--check-config", file});
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.output.find("SLUICED_HTTP: listen address must be ADDR:PORT (got 'nonsense')"),
              std::string::npos)
        << r.output;
  }
}

// Every flag main() declares, before or after the launch flags, has its variable.
TEST(Launch, EveryFlagHasAnEnvironmentVariable) {
  TempDir dir;
  const RunResult help = RunSluiced(dir, {"--help"});
  ASSERT_EQ(help.code, 0) << help.output;
  const std::regex flag(R"(\n +(?:-[a-z],)?--([a-z0-9-]+)([^\n]*))");
  int checked = 0;
  for (auto it = std::sregex_iterator(help.output.begin(), help.output.end(), flag);
       it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1];
    if (name == "help" || name == "version" || name == "check-config") continue;
    EXPECT_NE((*it)[2].str().find("(Env:" + EnvName(name) + ")"), std::string::npos)
        << "--" << name << " has no environment variable";
    ++checked;
  }
  EXPECT_GE(checked, 5) << help.output;  // config, http, grpc, redis, redis-password-file
}

TEST(Launch, BadValueFromTheEnvironmentNamesTheVariable) {
  TempDir dir;
  WriteFile(dir.File("a.yaml"), "domain: a\n");
  ScopedEnv http("SLUICED_GRPC", "nonsense");
  RunResult r = RunSluiced(dir, {"--check-config", dir.File("a.yaml")});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("SLUICED_GRPC: listen address must be ADDR:PORT"), std::string::npos)
      << r.output;
  // Given on the command line, the flag is named instead.
  r = RunSluiced(dir, {"--check-config", dir.File("a.yaml"), "--grpc", "nonsense"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--grpc: listen address must be ADDR:PORT"), std::string::npos)
      << r.output;
}

TEST(Launch, CheckConfigFileWinsOverSluicedConfigButNotOverAConflictingFlag) {
  TempDir dir;
  const std::string good = dir.File("good.yaml");
  const std::string other = dir.File("other.yaml");
  WriteFile(good, "domain: a\n");
  WriteFile(other, "domain: b\n");
  ScopedEnv config("SLUICED_CONFIG", other);
  RunResult r = RunSluiced(dir, {"--check-config", good});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("domain a"), std::string::npos) << r.output;
  r = RunSluiced(dir, {"--check-config", good, "--config", other});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("name different files"), std::string::npos) << r.output;
}

// The daemon itself (not only --check-config) takes its settings from the environment:
// the file's addresses cannot be bound (TEST-NET-1 is not local), so only the
// environment's make it start.
TEST(Launch, DaemonStartsFromEnvironmentAlone) {
  TempDir dir;
  const std::string file = dir.File("env.yaml");
  WriteFile(file,
            "sluiced:\n  http: 192.0.2.1:8080\n  grpc: 192.0.2.1:8081\n  reload_poll: 0\n"
            "domain: a\ndescriptors:\n"
            "  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, "
            "algorithm: sliding_window_log}\n");
  ScopedEnv config("SLUICED_CONFIG", file);
  ScopedEnv http("SLUICED_HTTP", "127.0.0.1:0");
  ScopedEnv grpc("SLUICED_GRPC", "127.0.0.1:0");
  const std::string log = dir.File("daemon.log");
  auto p = Process::Spawn({SLUICED_BINARY}, log);
  ASSERT_TRUE(p);
  const int port = WaitStarted(*p, log);
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto a = c.Get("/v1/check?domain=a&key=k&value=v");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200) << a->body;
  auto b = c.Get("/v1/check?domain=a&key=k&value=v");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 429) << b->body;
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 0);
}

// Receives one datagram on `fd` within `timeout`; empty on timeout.
std::string ReceiveDatagram(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return "";
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

// Type=notify: READY=1 once both servers listen, to the socket systemd names in
// NOTIFY_SOCKET (here one the test owns).
TEST(Launch, NotifiesReadinessToTheServiceManager) {
  TempDir dir;
  const std::string socket_path = dir.File("notify");
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  const std::string file = dir.File("n.yaml");
  WriteFile(file, "sluiced:\n  reload_poll: 0\ndomain: a\n");
  ScopedEnv notify("NOTIFY_SOCKET", socket_path);
  const std::string log = dir.File("daemon.log");
  auto p = Process::Spawn(
      {SLUICED_BINARY, "--config", file, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, log);
  ASSERT_TRUE(p);
  EXPECT_EQ(ReceiveDatagram(fd, std::chrono::seconds(30)), "READY=1\nSTATUS=serving");
  // Ready means listening: the port is known and answers.
  const int port = WaitStarted(*p, log);
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 0);
  ::close(fd);
}

TEST(Launch, NoNotifySocketNoMessageAndNoError) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(service::NotifyServiceManager("READY=1"));
  ScopedEnv bad("NOTIFY_SOCKET", "relative/path");
  EXPECT_FALSE(service::NotifyServiceManager("READY=1"));
}

TEST(PasswordFile, ReadsOneLineAndNamesThePathOnErrors) {
  TempDir dir;
  WriteFile(dir.File("nl"), "pa:ss@word\n");
  WriteFile(dir.File("crlf"), "pa ss\r\n");
  WriteFile(dir.File("bare"), "x");
  WriteFile(dir.File("empty"), "\n");
  EXPECT_EQ(*ReadSecretFile(dir.File("nl")), "pa:ss@word");
  EXPECT_EQ(*ReadSecretFile(dir.File("crlf")), "pa ss");
  EXPECT_EQ(*ReadSecretFile(dir.File("bare")), "x");
  auto e = ReadSecretFile(dir.File("empty"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(dir.File("empty") + "': empty"), std::string::npos);
  auto m = ReadSecretFile(dir.File("missing"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cannot open: No such file"), std::string::npos);
  WriteFile(dir.File("big"), std::string(64 * 1024 + 1, 'a'));
  EXPECT_FALSE(ReadSecretFile(dir.File("big")).ok());
}

TEST(PasswordFile, GoesIntoTheUrlEncodedAndReplacesAnyPasswordThere) {
  EXPECT_EQ(*WithRedisPassword("redis://h:1/2", "p@s:s/w"), "redis://:p%40s%3As%2Fw@h:1/2");
  EXPECT_EQ(*WithRedisPassword("redis://alice:old@h:1", "new"), "redis://alice:new@h:1");
  EXPECT_EQ(*WithRedisPassword("redis://oldtoken@h", "new"), "redis://:new@h");
  for (const char* url : {"", "memory://", "unix:///run/redis.sock"}) {
    auto r = WithRedisPassword(url, "sekrit");
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_EQ(r.status().message().find("sekrit"), std::string::npos);
  }
}

TEST(PasswordFile, AuthenticatesAgainstRealRedisAndIsNeverPrinted) {
  const std::string password = "pw:with@odd/chars";
  auto redis = RedisServer::Start({.password = password});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TempDir dir;
  const std::string secret = dir.File("redis-password");
  WriteFile(secret, password + "\n");
  const std::string file = dir.File("r.yaml");
  const std::string url = "redis://127.0.0.1:" + std::to_string((*redis)->port());
  WriteFile(file, "sluiced:\n  redis: " + url +
                      "\n  reload_poll: 0\ndomain: a\ndescriptors:\n"
                      "  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5, "
                      "failure_mode: fail_closed}\n");
  ScopedEnv pw("SLUICED_REDIS_PASSWORD_FILE", secret);

  // --check-config says where the password comes from, never what it is.
  const RunResult check = RunSluiced(dir, {"--check-config", file});
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_EQ(SummaryField(check.output, "redis password"), "from " + secret);
  EXPECT_EQ(SummaryField(check.output, "store"), url + " (with password)");
  EXPECT_EQ(check.output.find("pw"), std::string::npos) << check.output;

  // The daemon authenticates with it: its decision is stored in this Redis.
  const std::string log = dir.File("daemon.log");
  auto p = Process::Spawn(
      {SLUICED_BINARY, "--config", file, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, log);
  ASSERT_TRUE(p);
  const int port = WaitStarted(*p, log);
  ASSERT_GT(port, 0) << ReadFile(log);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto a = c.Get("/v1/check?domain=a&key=k&value=v");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200) << a->body;
  auto keys = (*redis)->Command({"DBSIZE"});
  ASSERT_TRUE(keys.ok());
  EXPECT_GE(keys->integer, 1) << "the decision did not reach the password-protected Redis";
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 0);
  // Not in the daemon's log either, plain or percent-encoded as it is in the URL.
  const std::string daemon_log = ReadFile(log);
  EXPECT_EQ(daemon_log.find(password), std::string::npos) << daemon_log;
  EXPECT_EQ(daemon_log.find("pw%3Awith"), std::string::npos) << daemon_log;
  EXPECT_EQ(daemon_log.find("odd"), std::string::npos) << daemon_log;

  // A wrong password: whether sluiced refuses to start or starts degraded, nothing it
  // prints contains the password.
  WriteFile(secret, "wrong-secret-value\n");
  const std::string bad_log = dir.File("bad.log");
  auto bad = Process::Spawn(
      {SLUICED_BINARY, "--config", file, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
      bad_log);
  ASSERT_TRUE(bad);
  (void)WaitStarted(*bad, bad_log);
  if (bad->running()) bad->Signal(SIGTERM);
  EXPECT_GE(bad->Wait(std::chrono::seconds(30)), 0);
  const std::string bad_output = ReadFile(bad_log);
  EXPECT_NE(bad_output.find("WRONGPASS"), std::string::npos) << bad_output;
  EXPECT_EQ(bad_output.find("wrong-secret-value"), std::string::npos) << bad_output;

  // A password file for the embedded store is a mistake, named as such.
  const RunResult mem = RunSluiced(dir, {"--check-config", file, "--redis", "memory://"});
  EXPECT_EQ(mem.code, 1);
  EXPECT_NE(mem.output.find("SLUICED_REDIS_PASSWORD_FILE: a Redis password file was given but "
                            "the store is memory://"),
            std::string::npos)
      << mem.output;
}

}  // namespace
}  // namespace sluice::testing
