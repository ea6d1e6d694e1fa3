// Faults injected into a real redis-server: stopped (SIGSTOP), killed and restarted,
// scripts flushed and connections killed under load, and bad input. Every call must
// come back within its deadline, the failure policy must decide while Redis cannot,
// and service must resume on its own.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "sluice/key.h"
#include "store_backends.h"
#include "wait.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr Micros kCallTimeout = 100'000;
// Scheduling slack on a loaded 2-core machine: the bound is about hangs (a call
// held until Redis answers), not speed.
constexpr auto kMargin = milliseconds(1000);

std::shared_ptr<RedisStore> Connect(const std::string& url, Micros call_timeout = kCallTimeout) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = call_timeout;
  o.connect_timeout = 500'000;
  o.on_warning = [](std::string_view) {};
  auto s = RedisStore::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

std::unique_ptr<Limiter> MakeLimiter(std::shared_ptr<Store> store, FailureMode mode) {
  LimiterOptions o;
  Policy p = Policy::TokenBucket("api", 1'000'000, 1'000'000, std::chrono::seconds(1));
  p.failure_mode = mode;
  o.policies = {p};
  o.store = std::move(store);
  auto l = Limiter::Create(std::move(o));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

// Polls until a decision comes from Redis again (bounded).
bool WaitForRecovery(Limiter& l, milliseconds bound = milliseconds(15'000)) {
  const auto end = steady_clock::now() + bound;
  while (steady_clock::now() < end) {
    auto d = l.Acquire("probe");
    if (d.ok() && d->source == DecisionSource::kStore) return true;
    std::this_thread::sleep_for(milliseconds(20));  // polling a real process, not timing
  }
  return false;
}

TEST(Faults, StoppedRedisNeverHoldsACallerPastItsDeadline) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Connect((*server)->Url());
  ASSERT_NE(store, nullptr);
  auto open = MakeLimiter(store, FailureMode::kFailOpen);
  auto closed = MakeLimiter(store, FailureMode::kFailClosed);
  ASSERT_EQ(open->Acquire("k")->source, DecisionSource::kStore);

  (*server)->Pause();
  std::atomic<int> late{0}, wrong{0}, calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Limiter& l = t % 2 ? *open : *closed;
      const DecisionSource want = t % 2 ? DecisionSource::kFailOpen : DecisionSource::kFailClosed;
      for (int i = 0; i < 15; ++i) {
        const auto start = steady_clock::now();
        auto d = l.Acquire("user:" + std::to_string(i));
        if (steady_clock::now() - start > std::chrono::microseconds(kCallTimeout) + kMargin) {
          ++late;
        }
        if (!d.ok() || d->source != want || d->allowed != (t % 2 == 1)) ++wrong;
        ++calls;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 120);
  EXPECT_EQ(late.load(), 0) << "calls must return within the deadline plus a margin";
  EXPECT_EQ(wrong.load(), 0) << "the failure policy must decide";
  EXPECT_GT(open->Stats().fail_open, 0u);
  EXPECT_GT(closed->Stats().fail_closed, 0u);

  (*server)->Resume();
  EXPECT_TRUE(WaitForRecovery(*open));
  EXPECT_GT(store->Stats().timeouts, 0u);
}

TEST(Faults, KilledAndRestartedRedisIsReconnectedWithItsScripts) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // A long deadline: while Redis is down calls must fail at once, not wait for it.
  auto store = Connect((*server)->Url(), 3'000'000);
  ASSERT_NE(store, nullptr);
  auto limiter = MakeLimiter(store, FailureMode::kFailClosed);
  ASSERT_EQ(limiter->Acquire("k")->source, DecisionSource::kStore);

  (*server)->Stop();
  for (int i = 0; i < 20; ++i) {
    const auto start = steady_clock::now();
    auto d = limiter->Acquire("k");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source, DecisionSource::kFailClosed);
    EXPECT_LT(steady_clock::now() - start, kMargin) << "no offline queue: fail at once";
  }
  ASSERT_TRUE((*server)->Restart().ok());
  EXPECT_TRUE(WaitForRecovery(*limiter));
  EXPECT_GT(store->Stats().reconnects, 0u);
  // The new server never saw SCRIPT LOAD from a caller: the reconnect loaded it.
  auto d = limiter->Acquire("after-restart");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->source, DecisionSource::kStore);
}

// Runs `disrupt` repeatedly while 6 threads make decisions; returns how many of
// them were not made by Redis.
template <typename F>
int DecideUnderLoad(Limiter& limiter, F disrupt, int* total) {
  std::atomic<bool> stop{false};
  std::atomic<int> not_store{0}, errors{0}, n{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        auto d = limiter.Acquire("user:" + std::to_string(t * 1000 + i % 50));
        if (!d.ok()) {
          ++errors;
        } else if (d->source != DecisionSource::kStore) {
          ++not_store;
        }
        ++n;
      }
    });
  }
  for (int round = 0; round < 10; ++round) {
    const int before = n.load();
    while (n.load() < before + 200) std::this_thread::yield();
    disrupt();
  }
  const int before = n.load();
  while (n.load() < before + 200) std::this_thread::yield();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0) << "no error may reach a caller";
  *total = n.load();
  return not_store.load();
}

TEST(Faults, ScriptFlushUnderLoadIsInvisibleToCallers) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisStoreOptions o;
  o.url = (*server)->Url();
  o.call_timeout = kPatientCallTimeout;
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok());
  auto limiter = MakeLimiter(*store, FailureMode::kFailClosed);
  int total = 0;
  const int fallback = DecideUnderLoad(
      *limiter,
      [&] {
        ASSERT_TRUE((*server)->Command({"SCRIPT", "FLUSH"}).ok());
      },
      &total);
  EXPECT_EQ(fallback, 0) << "every decision must still come from Redis";
  EXPECT_GT((*store)->Stats().script_reloads, 0u);
  EXPECT_GT(total, 2000);
}

// A one-check call runs its algorithm's own script, a batch the batch script: after
// SCRIPT FLUSH each of the six is reloaded on first use, once, and no caller sees
// NOSCRIPT.
TEST(Faults, ScriptFlushReloadsEveryScriptOnFirstUse) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Connect((*server)->Url(), kPatientCallTimeout);
  ASSERT_NE(store, nullptr);
  const Policy policies[] = {
      Policy::FixedWindow("fw", 10, std::chrono::seconds(1)),
      Policy::SlidingWindowLog("swl", 10, std::chrono::seconds(1)),
      Policy::SlidingWindowCounter("swc", 10, std::chrono::seconds(1)),
      Policy::TokenBucket("tb", 10, 10, std::chrono::seconds(1)),
      Policy::Gcra("gcra", 10, std::chrono::seconds(1), 10),
  };
  const std::string keys[] = {*StoreKey("flush", "a", "fw"), *StoreKey("flush", "a", "swl"),
                              *StoreKey("flush", "a", "swc"), *StoreKey("flush", "a", "tb"),
                              *StoreKey("flush", "a", "gcra")};
  auto one = [&](std::size_t i) {
    StoreCheck c{.policy = &policies[i], .key = keys[i], .cost = 1};
    Decision d;
    Status s = store->Run({.checks = std::span<const StoreCheck>(&c, 1), .now = 0},
                          std::span<Decision>(&d, 1));
    EXPECT_TRUE(s.ok()) << policies[i].name << ": " << s.ToString();
    EXPECT_TRUE(d.allowed) << policies[i].name;
    EXPECT_GT(d.limit, 0u) << policies[i].name;
  };
  auto batch = [&] {
    StoreCheck c[2] = {{.policy = &policies[0], .key = keys[0], .cost = 1},
                       {.policy = &policies[3], .key = keys[3], .cost = 1}};
    Decision d[2];
    Status s = store->Run({.checks = c, .now = 0}, d);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(d[0].allowed && d[1].allowed);
  };
  // Loaded at connect: no reload needed.
  for (std::size_t i = 0; i < std::size(policies); ++i) one(i);
  batch();
  EXPECT_EQ(store->Stats().script_reloads, 0u);
  ASSERT_TRUE((*server)->Command({"SCRIPT", "FLUSH"}).ok());
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < std::size(policies); ++i) {
    one(i);
    EXPECT_EQ(store->Stats().script_reloads, ++expected)
        << policies[i].name << " reloads its own script";
    one(i);
    EXPECT_EQ(store->Stats().script_reloads, expected) << policies[i].name << ": loaded once";
  }
  batch();
  EXPECT_EQ(store->Stats().script_reloads, ++expected) << "the batch script reloads too";
  batch();
  EXPECT_EQ(store->Stats().script_reloads, expected);
  EXPECT_EQ(store->Stats().errors, 0u);
}

TEST(Faults, ClientKillUnderLoadGivesDecisionsNotErrors) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Connect((*server)->Url(), 3'000'000);
  ASSERT_NE(store, nullptr);
  auto limiter = MakeLimiter(store, FailureMode::kFailOpen);
  int total = 0;
  const int fallback = DecideUnderLoad(
      *limiter,
      [&] {
        ASSERT_TRUE((*server)->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
      },
      &total);
  // Calls in flight on a killed connection may have run: they are not retried, and
  // while a connection is being re-established calls fail at once (no offline
  // queue). The failure policy decides those; callers never see an error, and once
  // reconnected every decision comes from Redis again.
  EXPECT_GT(total, fallback);
  // The reconnect runs on the store's I/O thread: on a loaded machine all ten kills
  // and the 2,000 decisions around them can pass before it gets the CPU, so
  // `reconnects` is read only once a decision came from Redis again (it is counted
  // before the new connection takes calls), and waited for in any case.
  ASSERT_TRUE(WaitForRecovery(*limiter));
  EXPECT_TRUE(WaitUntil([&] { return store->Stats().reconnects > 0; }))
      << "reconnects: " << store->Stats().reconnects;
  for (int i = 0; i < 300; ++i) {
    auto d = limiter->Acquire("after");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->source, DecisionSource::kStore) << i;
  }
}

// A TCP server that answers every connection with `answer` (or nothing) and closes.
class FakeServer {
 public:
  // `reset`: close with an RST right after answering.
  explicit FakeServer(std::string answer, bool silent = false, bool reset = false)
      : answer_(std::move(answer)), silent_(silent), reset_(reset) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        if (silent_) {
          held_.push_back(c);
          continue;
        }
        char buf[256];
        [[maybe_unused]] ssize_t r = read(c, buf, sizeof(buf));
        [[maybe_unused]] ssize_t w = write(c, answer_.data(), answer_.size());
        if (reset_) {
          linger l{1, 0};
          setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        }
        close(c);
      }
    });
  }
  ~FakeServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    for (int c : held_) close(c);
  }
  std::string Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string answer_;
  bool silent_;
  bool reset_;
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> held_;
  std::thread thread_;
};

Status CreateError(const std::string& url, Micros connect_timeout = 500'000) {
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout = connect_timeout;
  auto s = RedisStore::Create(o);
  return s.status();
}

void ExpectError(const Status& s, ErrorCode code, const std::string& text) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
}

TEST(BadInput, MalformedUrlsAreRejectedWithTheReason) {
  ExpectError(CreateError("http://localhost:6379"), ErrorCode::kInvalidArgument, "unknown scheme");
  ExpectError(CreateError("redis://:6379"), ErrorCode::kInvalidArgument, "missing host");
  ExpectError(CreateError("redis://localhost:99999"), ErrorCode::kInvalidArgument, "port '99999'");
  ExpectError(CreateError("redis://localhost:6379/x"), ErrorCode::kInvalidArgument, "database 'x'");
  ExpectError(CreateError("unix://relative.sock"), ErrorCode::kInvalidArgument, "absolute");
  const Status s = CreateError("redis://user:hunter2@localhost:abc");
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << "passwords are masked";
}

TEST(BadInput, WrongOrMissingPasswordsAreNamed) {
  auto server = RedisServer::Start({.password = "s3cret"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string port = std::to_string((*server)->port());
  ExpectError(CreateError("redis://:wrong@127.0.0.1:" + port), ErrorCode::kInvalidArgument,
              "authentication");
  ExpectError(CreateError("redis://127.0.0.1:" + port), ErrorCode::kInvalidArgument,
              "requires a password");
  ExpectError(CreateError("redis://bob:s3cret@127.0.0.1:" + port), ErrorCode::kInvalidArgument,
              "authentication");
  EXPECT_TRUE(CreateError((*server)->Url()).ok());
  EXPECT_TRUE(CreateError("redis://default:s3cret@127.0.0.1:" + port).ok()) << "ACL form";
}

TEST(BadInput, NothingListeningIsAClearError) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok());
  const std::string url = (*server)->Url();
  (*server)->Stop();
  ExpectError(CreateError(url), ErrorCode::kUnavailable, "Connection refused");
}

TEST(BadInput, ANonRedisServerIsNamedAsSuch) {
  FakeServer http("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  ExpectError(CreateError(http.Url()), ErrorCode::kUnavailable, "did not answer like a Redis");
  FakeServer silent("", /*silent=*/true);
  const auto start = steady_clock::now();
  ExpectError(CreateError(silent.Url(), 300'000), ErrorCode::kUnavailable, "did not answer");
  EXPECT_LT(steady_clock::now() - start, milliseconds(300) + kMargin) << "bounded by the timeout";
}

TEST(BadInput, AServerHangingUpMidHandshakeIsAClearError) {
  // Answers PING like Redis, then resets the connection: the error names the step the
  // handshake was at (the module probe, or with module=off the script upload).
  FakeServer rude("+PONG\r\n", /*silent=*/false, /*reset=*/true);
  for (int i = 0; i < 5; ++i) {
    const Status s = CreateError(rude.Url());
    EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("SLUICE.VERSION"), std::string::npos) << s.ToString();
    const Status lua = CreateError(rude.Url() + "?module=off");
    EXPECT_EQ(lua.code(), ErrorCode::kUnavailable) << lua.ToString();
    EXPECT_NE(lua.message().find("SCRIPT LOAD"), std::string::npos) << lua.ToString();
  }
}

TEST(BadInput, ImpossibleCostsAndBatchesAreInvalidArguments) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  auto store = Connect(server->Url());
  ASSERT_NE(store, nullptr);
  const Policy p = Policy::FixedWindow("api", 10, std::chrono::seconds(1));
  StoreCheck c{.policy = &p, .key = "sluice:{k}:api", .cost = 11};
  Decision out[17];
  ExpectError(store->Run({.checks = std::span<const StoreCheck>(&c, 1), .now = 0}, out),
              ErrorCode::kInvalidArgument, "exceeds the capacity 10");
  std::vector<StoreCheck> many(17, StoreCheck{.policy = &p, .key = "sluice:{k}:api", .cost = 1});
  ExpectError(store->Run({.checks = many, .now = 0}, out), ErrorCode::kInvalidArgument,
              "at most 16");
  ExpectError(CreateError(server->Url() + "/999999"), ErrorCode::kInvalidArgument,
              "cannot select database");
}

}  // namespace
}  // namespace sluice::testing
