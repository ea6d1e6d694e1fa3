// `sluice check/peek/reset` and `sluice bench` end to end: the built binary against a
// real redis-server started by the fixture (tests/support/redis_server.h).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/bench.h"
#include "cli/store_flags.h"
#include "gtest/gtest.h"
#include "redis_server.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice {
namespace {

struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the sluice binary with `args`; stdout and stderr are captured separately.
Outcome Sluice(const std::vector<std::string>& args) {
  char dir[] = "/tmp/sluice-cli-test.XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  std::vector<std::string> storage = {SLUICE_CLI_BIN};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
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
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir);
  return r;
}

// The number after "name": in a flat JSON object (-1 if absent).
double JsonNumber(const std::string& json, const std::string& name) {
  const std::string needle = "\"" + name + "\":";
  const std::size_t at = json.find(needle);
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

std::string Describe(const Outcome& r) {
  return "exit " + std::to_string(r.rc) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

class CliRedisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = testing::RedisServer::Start();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s).release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    auto r = server_->Command({"FLUSHALL"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  static std::vector<std::string> Args(std::vector<std::string> args) {
    args.push_back("--redis");
    args.push_back(server_->Url());
    return args;
  }
  static testing::RedisServer* server_;
};
testing::RedisServer* CliRedisTest::server_ = nullptr;

TEST_F(CliRedisTest, CheckIsDeniedAfterTheLimitAndResetRestoresIt) {
  const std::vector<std::string> policy = {
      "--key", "user:42", "--rate", "3/h", "--policy-name", "api", "-a", "sliding_window_log"};
  auto with = [&](std::string cmd) {
    std::vector<std::string> a = {cmd};
    a.insert(a.end(), policy.begin(), policy.end());
    return Args(a);
  };
  for (int i = 0; i < 3; ++i) {
    Outcome r = Sluice(with("check"));
    ASSERT_EQ(r.rc, 0) << Describe(r);
    EXPECT_NE(r.out.find("allowed: " + std::to_string(2 - i) + " of 3 left"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("sluice:{user%3A42}:api"), std::string::npos) << r.out;
  }
  Outcome denied = Sluice(with("check"));
  EXPECT_EQ(denied.rc, 1) << Describe(denied);
  EXPECT_NE(denied.out.find("denied: 0 of 3 left; retry in "), std::string::npos) << denied.out;

  Outcome peek = Sluice(with("peek"));
  EXPECT_EQ(peek.rc, 1) << Describe(peek);
  EXPECT_NE(peek.out.find("would deny"), std::string::npos) << peek.out;

  Outcome reset = Sluice(with("reset"));
  EXPECT_EQ(reset.rc, 0) << Describe(reset);
  EXPECT_NE(reset.out.find("reset: sluice:{user%3A42}:api"), std::string::npos) << reset.out;

  peek = Sluice(with("peek"));
  EXPECT_EQ(peek.rc, 0) << Describe(peek);
  EXPECT_NE(peek.out.find("would allow: 3 of 3 left"), std::string::npos) << peek.out;
  // Peeking consumed nothing.
  Outcome again = Sluice(with("peek"));
  EXPECT_NE(again.out.find("would allow: 3 of 3 left"), std::string::npos) << again.out;
}

TEST_F(CliRedisTest, EveryAlgorithmDeniesOnceItsLimitIsUsed) {
  for (const char* alg :
       {"fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"}) {
    SCOPED_TRACE(alg);
    // Two units per 300 days: no window boundary or refill can fall within the test.
    const auto args =
        Args({"check", "--key", std::string("k-") + alg, "--rate", "2/300d", "-a", alg});
    Outcome a = Sluice(args);
    Outcome b = Sluice(args);
    Outcome c = Sluice(args);
    EXPECT_EQ(a.rc, 0) << Describe(a);
    EXPECT_EQ(b.rc, 0) << Describe(b);
    EXPECT_EQ(c.rc, 1) << Describe(c);
  }
}

TEST_F(CliRedisTest, JsonOutputCarriesTheDecision) {
  Outcome r = Sluice(Args({"check", "--key", "j", "--rate", "10/min", "-a", "token_bucket",
                           "--burst", "5", "--cost", "2", "--json"}));
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_NE(r.out.find("\"allowed\":true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"store_key\":\"sluice:{j}:default\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"algorithm\":\"token_bucket\""), std::string::npos) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "limit"), 5);
  EXPECT_EQ(JsonNumber(r.out, "remaining"), 3);
  EXPECT_EQ(JsonNumber(r.out, "cost"), 2);
  EXPECT_EQ(JsonNumber(r.out, "retry_after_us"), 0);
  EXPECT_GT(JsonNumber(r.out, "reset_after_us"), 0);
}

// The CLI builds the key exactly as an application's Limiter does: what the
// application consumed, `sluice peek` sees, and what `sluice reset` clears, the
// application gets back.
TEST_F(CliRedisTest, SeesAndResetsWhatAnApplicationsLimiterUses) {
  RedisStoreOptions so;
  so.url = server_->Url();
  so.call_timeout = testing::kPatientCallTimeout;  // (what it decides, not when)
  auto store = RedisStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  LimiterOptions lo;
  lo.policies = {Policy::FixedWindow("login", 2, std::chrono::hours(24 * 300))};
  lo.store = *store;
  lo.key_prefix = "myapp";
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  ASSERT_TRUE((*limiter)->Acquire("ip:10.0.0.1")->allowed);
  ASSERT_TRUE((*limiter)->Acquire("ip:10.0.0.1")->allowed);

  const std::vector<std::string> flags = {
      "--key", "ip:10.0.0.1", "--rate", "2/300d",        "-a",
      "fixed", "--prefix",    "myapp",  "--policy-name", "login"};
  auto with = [&](std::string cmd) {
    std::vector<std::string> a = {cmd};
    a.insert(a.end(), flags.begin(), flags.end());
    return Args(a);
  };
  Outcome peek = Sluice(with("peek"));
  EXPECT_EQ(peek.rc, 1) << Describe(peek);
  EXPECT_NE(peek.out.find("0 of 2 left"), std::string::npos) << peek.out;
  Outcome reset = Sluice(with("reset"));
  ASSERT_EQ(reset.rc, 0) << Describe(reset);
  EXPECT_TRUE((*limiter)->Acquire("ip:10.0.0.1")->allowed);
}

TEST_F(CliRedisTest, RefusedPortIsAStoreError) {
  // A port that was just free: nothing listens there.
  auto other = testing::RedisServer::Start();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  const std::string url = (*other)->Url();
  (*other)->Stop();
  for (const char* cmd : {"check", "peek", "reset"}) {
    Outcome r =
        Sluice({cmd, "--key", "a", "--rate", "1/s", "--redis", url, "--connect-timeout", "2s"});
    EXPECT_EQ(r.rc, 3) << Describe(r);
    EXPECT_NE(r.err.find("store error: cannot connect to " + url), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("refused"), std::string::npos) << r.err;
  }
  Outcome b = Sluice({"bench", "--redis", url, "--requests", "10", "-q"});
  EXPECT_EQ(b.rc, 3) << Describe(b);
  EXPECT_NE(b.err.find("cannot connect"), std::string::npos) << b.err;
}

TEST_F(CliRedisTest, MalformedUrlIsAStoreErrorNamingTheProblem) {
  Outcome r =
      Sluice({"check", "--key", "a", "--rate", "1/s", "--redis", "redis://127.0.0.1:notaport"});
  EXPECT_EQ(r.rc, 3) << Describe(r);
  EXPECT_NE(r.err.find("notaport"), std::string::npos) << r.err;
  Outcome s = Sluice({"check", "--key", "a", "--rate", "1/s", "--redis", "http://127.0.0.1:6379"});
  EXPECT_EQ(s.rc, 3) << Describe(s);
  EXPECT_NE(s.err.find("unknown store URL 'http://127.0.0.1:6379'"), std::string::npos) << s.err;
}

TEST_F(CliRedisTest, WrongPasswordIsAStoreError) {
  testing::RedisServerOptions o;
  o.password = "s3cret";
  auto guarded = testing::RedisServer::Start(o);
  ASSERT_TRUE(guarded.ok()) << guarded.status().ToString();
  const std::string port = std::to_string((*guarded)->port());
  Outcome wrong = Sluice(
      {"check", "--key", "a", "--rate", "1/s", "--redis", "redis://:nope@127.0.0.1:" + port});
  EXPECT_EQ(wrong.rc, 3) << Describe(wrong);
  EXPECT_NE(wrong.err.find("authentication"), std::string::npos) << wrong.err;
  Outcome none =
      Sluice({"check", "--key", "a", "--rate", "1/s", "--redis", "redis://127.0.0.1:" + port});
  EXPECT_EQ(none.rc, 3) << Describe(none);
  EXPECT_NE(none.err.find("requires a password"), std::string::npos) << none.err;
  Outcome right = Sluice({"check", "--key", "a", "--rate", "1/s", "--redis", (*guarded)->Url()});
  EXPECT_EQ(right.rc, 0) << Describe(right);
}

TEST_F(CliRedisTest, BadFlagsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"check", "--key", "a", "--rate", "abc"}, "--rate: rate 'abc'"},
      {{"check", "--key", "a"}, "--rate is required"},
      {{"check", "--rate", "1/s"}, "--key is required"},
      {{"check", "--key", "a", "--rate", "1/s", "-a", "leaky"}, "--algorithm"},
      {{"check", "--key", "a", "--rate", "1/s", "-a", "fixed", "--burst", "5"}, "--burst"},
      {{"check", "--key", "a", "--rate", "5/s", "--cost", "6"}, "exceeds the capacity"},
      {{"check", "--key", "a", "--rate", "1/s", "--policy-name", "bad name"}, "name"},
      {{"check", "--key", "a", "--rate", "1/s", "--timeout", "soon"}, "--timeout"},
      {{"peek", "--key", "a", "--rate", "1/s", "--frobnicate"}, "frobnicate"},
      {{"bench", "--requests", "0"}, "--requests"},
      {{"bench", "--duration", "5"}, "--duration"},
      {{"bench", "--api", "magic"}, "--api"},
      {{"bench", "-c", "0"}, "--concurrency"},
      {{"bench", "--block-for", "soon"}, "--block-for"},
      {{"bench", "--on-change", "later"}, "--on-change: unknown on_change mode 'later'"},
      {{"bench", "-a", "sliding_window_log", "--on-change", "reset"}, "--on-change"},
      {{"bench", "--overage", "owe"}, "--overage: unknown overage 'owe'"},
      {{"bench", "-a", "concurrency", "--api", "limiter"}, "benchmarked on the store"},
      {{"bench", "--overage", "charge", "--max-wait", "1s"},
       "--max-wait: a reservation that waits"},
  };
  for (const Case& c : cases) {
    Outcome r = Sluice(Args(c.args));
    EXPECT_EQ(r.rc, 2) << Describe(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << Describe(r);
  }
}

TEST_F(CliRedisTest, BenchCountsEveryDecision) {
  // A 300-day window: the keys are still there (their TTL runs to the window's end)
  // when the test lists them below.
  // --coalesce 1: one Redis call per decision, so the calls count the decisions too.
  Outcome r = Sluice(Args({"bench", "--requests", "3000", "-c", "16", "--keys", "50", "--rate",
                           "100000/300d", "--timeout", "5s", "--coalesce", "1", "--json", "-q"}));
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "decisions"), 3000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "error_total"), 0) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "allowed") + JsonNumber(r.out, "denied"), 3000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "store_calls"), 3000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "coalesce"), 1) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "concurrency"), 16) << r.out;
  EXPECT_GT(JsonNumber(r.out, "decisions_per_s"), 0) << r.out;
  const double p50 = JsonNumber(r.out, "p50"), p99 = JsonNumber(r.out, "p99");
  EXPECT_GT(p50, 0) << r.out;
  EXPECT_LE(p50, p99) << r.out;
  EXPECT_LE(p99, JsonNumber(r.out, "max") * 1.04) << r.out;
  // The bench keys are the Limiter's: prefix:{bench%3A<12 digits>}:bench.
  auto keys = server_->Command({"KEYS", "sluice:{bench%3A0000000000*}:bench"});
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->elements.size(), 50u);
}

TEST_F(CliRedisTest, BenchOnAHotKeyAllowsExactlyTheLimit) {
  // The sliding log is exact: 64 concurrent callers on one key get 100 of 1000.
  Outcome r = Sluice(Args({"bench", "--requests", "1000", "--hot-key", "-a", "sliding_window_log",
                           "--rate", "100/h", "--timeout", "5s", "--json", "-q"}));
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "allowed"), 100) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "denied"), 900) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "keys"), 1) << r.out;
}

// A concurrency limit is benchmarked as permits: each caller acquires one (a new id) and
// releases it in its next call. 16 callers on one key of 4 slots: every call is a
// decision, none an error, and the set holds at most 4 permits at the end (those
// acquired by a caller's last call).
TEST_F(CliRedisTest, BenchOfAConcurrencyLimitAcquiresAndReleasesPermits) {
  Outcome r = Sluice(Args({"bench", "--requests", "2000", "-c", "16", "--hot-key", "-a",
                           "concurrency", "--rate", "4/1h", "--timeout", "5s", "--json", "-q"}));
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "decisions"), 2000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "error_total"), 0) << r.out;
  // (released permits free their slots: far more than 4 acquires and releases allowed)
  EXPECT_GT(JsonNumber(r.out, "allowed"), 200) << r.out;
  auto keys = server_->Command({"KEYS", "sluice:{bench%3A0000000000*}:bench"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 1u);
  auto held = server_->Command({"ZCARD", keys->elements[0].str});
  ASSERT_TRUE(held.ok());
  EXPECT_LE(held->integer, 4) << "at most the limit held";
}

TEST_F(CliRedisTest, BenchTextSummaryAndProgressGoToTheirStreams) {
  Outcome r = Sluice(Args({"bench", "--requests", "500", "-c", "8", "--timeout", "5s", "--coalesce",
                           "1"}));  // one Redis call per decision
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("decisions +500 \\([0-9]+/s\\)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("latency +p50 [0-9.]+(us|ms), p90"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("errors +0\n"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("redis calls +500\n"))) << r.out;
}

// With coalescing (the default) every decision is still made and counted; the Redis
// calls (script calls sent) are at most one per decision.
TEST_F(CliRedisTest, BenchWithCoalescingCountsScriptCalls) {
  Outcome r = Sluice(Args({"bench", "--requests", "3000", "-c", "64", "--keys", "50", "--rate",
                           "100000/300d", "--timeout", "5s", "--json", "-q"}));
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "decisions"), 3000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "error_total"), 0) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "coalesce"), 32) << r.out;
  EXPECT_GT(JsonNumber(r.out, "store_calls"), 0) << r.out;
  EXPECT_LE(JsonNumber(r.out, "store_calls"), 3000) << r.out;
  Outcome bad = Sluice(Args({"bench", "--requests", "10", "--coalesce", "0"}));
  EXPECT_EQ(bad.rc, 2) << Describe(bad);
  EXPECT_NE(bad.err.find("--coalesce"), std::string::npos) << Describe(bad);
}

TEST_F(CliRedisTest, DenyCacheSavesRedisCallsOnAFloodedKey) {
  // (--coalesce 1: one script call per store call, so store_calls counts decisions sent;
  // the lean sliding-log script's calls merge from two queued together)
  const std::vector<std::string> flood = {
      "bench",     "--api", "limiter",    "--hot-key", "-a",         "sliding_window_log",
      "--rate",    "10/h",  "--requests", "400",       "-c",         "4",
      "--timeout", "5s",    "--json",     "-q",        "--coalesce", "1"};
  Outcome off_run = Sluice(Args([&] {
    auto a = flood;
    a.push_back("--no-deny-cache");
    return a;
  }()));
  ASSERT_EQ(off_run.rc, 0) << Describe(off_run);
  EXPECT_EQ(JsonNumber(off_run.out, "allowed"), 10) << off_run.out;
  EXPECT_EQ(JsonNumber(off_run.out, "store_calls"), 400) << off_run.out;
  EXPECT_EQ(JsonNumber(off_run.out, "deny_cache_hits"), 0) << off_run.out;

  ASSERT_TRUE(server_->Command({"FLUSHALL"}).ok());
  Outcome on_run = Sluice(Args(flood));
  ASSERT_EQ(on_run.rc, 0) << Describe(on_run);
  EXPECT_EQ(JsonNumber(on_run.out, "allowed"), 10) << on_run.out;
  // Ten allowed, then one denial per thread at most before the cache knows the key.
  EXPECT_LE(JsonNumber(on_run.out, "store_calls"), 10 + 4) << on_run.out;
  EXPECT_EQ(JsonNumber(on_run.out, "store_calls") + JsonNumber(on_run.out, "deny_cache_hits"), 400)
      << on_run.out;
}

TEST(CliBench, MemoryStoreNeedsNoServer) {
  Outcome r = Sluice({"bench", "--store", "memory://", "--requests", "2000", "-c", "2", "--hot-key",
                      "--rate", "100/h", "-a", "gcra", "--json", "-q"});
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "decisions"), 2000) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "allowed"), 100) << r.out;
  EXPECT_EQ(r.out.find("store_calls"), std::string::npos) << r.out;
}

// --block-for: once the hot key is over its limit it stays denied (Policy::block_for).
TEST(CliBench, BlockForKeepsTheKeyDenied) {
  Outcome r = Sluice({"bench", "--store", "memory://", "--requests", "500", "-c", "2", "--hot-key",
                      "--rate", "10/h", "-a", "token_bucket", "--block-for", "1h", "--json", "-q"});
  ASSERT_EQ(r.rc, 0) << Describe(r);
  EXPECT_EQ(JsonNumber(r.out, "allowed"), 10) << r.out;
  EXPECT_EQ(JsonNumber(r.out, "denied"), 490) << r.out;
}

// True when `s` is well-formed UTF-8 (RFC 3629), checked independently of the tool.
bool IsUtf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      n = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// Issue #11 item 7: a key is bytes, JSON is UTF-8. Bytes that are not UTF-8 come out
// as \ufffd; well-formed multi-byte characters are kept as they are.
TEST(CliFlags, JsonWithAKeyThatIsNotUtf8IsValidJson) {
  const std::string key = "u\xff\xfe-caf\xc3\xa9-\xed\xa0\x80-\xc0\xaf-\xe2\x82";
  for (const char* command : {"check", "peek", "reset"}) {
    Outcome r = Sluice({command, "--store", "memory://", "--key", key, "--rate", "5/s", "--json"});
    ASSERT_EQ(r.rc, 0) << Describe(r);
    EXPECT_TRUE(IsUtf8(r.out)) << command << ": " << r.out;
    EXPECT_NE(r.out.find(R"("key":"u\ufffd\ufffd-caf)"
                         "\xc3\xa9"
                         R"(-\ufffd\ufffd\ufffd-\ufffd\ufffd-\ufffd\ufffd")"),
              std::string::npos)
        << command << ": " << r.out;
  }
}

TEST(CliFlags, JsonStringEscapesWhatJsonRequires) {
  EXPECT_EQ(cli::JsonString("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
  EXPECT_EQ(cli::JsonString("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");           // U+1F600 kept
  EXPECT_EQ(cli::JsonString("\xf4\x90\x80\x80"), R"("\ufffd\ufffd\ufffd\ufffd")");  // > U+10FFFF
  EXPECT_EQ(cli::JsonString("\xe0\x80\xaf"), R"("\ufffd\ufffd\ufffd")");            // overlong
  EXPECT_EQ(cli::JsonString("\xc3"), R"("\ufffd")");                                // truncated
}

// Issue #11 item 7: zero and negative values name the flag and say what is wrong —
// not CLI11's "not in range 0.000000 to 1.79e308" nor "needs a unit".
TEST(CliFlags, ZeroAndNegativeValuesSayWhatIsWrong) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<std::string> check = {"check", "--store", "memory://", "--key",
                                          "a",     "--rate",  "5/s"};
  const auto with = [&](std::vector<std::string> base, std::vector<std::string> more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const std::vector<std::string> bench = {"bench", "--store",    "memory://",
                                          "-q",    "--requests", "10"};
  const std::vector<Case> cases = {
      {with(check, {"--cost", "0"}), "--cost: must be at least 1, not '0'"},
      {with(check, {"--cost", "-3"}), "--cost: must be at least 1, not '-3'"},
      {with(check, {"--timeout", "0"}), "--timeout must be more than 0, not '0'"},
      {with(check, {"--timeout", "0ms"}), "--timeout must be more than 0, not '0ms'"},
      {with(check, {"--timeout", "-5ms"}), "--timeout must be more than 0, not '-5ms'"},
      {with(check, {"--connect-timeout", "-1s"}),
       "--connect-timeout must be more than 0, not '-1s'"},
      {with(check, {"-a", "bucket", "--burst", "0"}), "--burst: must be at least 1, not '0'"},
      {with(check, {"-a", "gcra", "--burst", "-2"}), "--burst: must be at least 1, not '-2'"},
      {with(bench, {"--cost", "0"}), "--cost: must be at least 1, not '0'"},
      {with(bench, {"--target-rate", "-1"}), "--target-rate: must be more than 0, not '-1'"},
      {{"bench", "--store", "memory://", "-q", "--duration", "0"},
       "--duration must be more than 0, not '0'"},
      {{"bench", "--store", "memory://", "-q", "--duration", "-2s"},
       "--duration must be more than 0, not '-2s'"},
      {{"bench", "--store", "memory://", "-q", "--requests", "0"},
       "--requests: must be at least 1, not '0'"},
  };
  for (const Case& c : cases) {
    Outcome r = Sluice(c.args);
    EXPECT_EQ(r.rc, 2) << Describe(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "want: " << c.message << "\n"
                                                        << Describe(r);
    EXPECT_EQ(r.err.find("not in range"), std::string::npos) << Describe(r);
    EXPECT_EQ(r.err.find("needs a unit"), std::string::npos) << Describe(r);
  }
  // Still a unit error when only the unit is missing.
  Outcome unitless = Sluice(with(check, {"--timeout", "5"}));
  EXPECT_EQ(unitless.rc, 2) << Describe(unitless);
  EXPECT_NE(unitless.err.find("--timeout: duration '5' needs a unit"), std::string::npos)
      << Describe(unitless);
}

TEST(LatencyHistogram, QuantilesAreWithinTheBucketResolution) {
  cli::LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100000; ++v) h.Record(v * 1000);  // 1us .. 100ms
  const auto counts = h.Snapshot();
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double want = q * 100000 * 1000;
    const double got = static_cast<double>(cli::LatencyHistogram::Quantile(counts, q));
    EXPECT_NEAR(got, want, want * 0.035) << "q=" << q;
  }
  EXPECT_EQ(h.max(), 100000u * 1000);
  EXPECT_EQ(cli::LatencyHistogram::Quantile(std::vector<std::uint64_t>(counts.size(), 0), 0.5), 0u);
}

TEST(LatencyHistogram, BucketsAreOrderedAndContainTheirValues) {
  std::uint64_t v = 0;
  int last = -1;
  while (v < (std::uint64_t{1} << 50)) {
    const int i = cli::LatencyHistogram::Index(v);
    ASSERT_GE(i, last) << v;
    ASSERT_LT(i, cli::LatencyHistogram::kBuckets);
    const std::uint64_t mid = cli::LatencyHistogram::Value(i);
    ASSERT_EQ(cli::LatencyHistogram::Index(mid), i) << v;  // the middle is in the bucket
    last = i;
    v = v < 64 ? v + 1 : v + v / 37;
  }
}

}  // namespace
}  // namespace sluice
