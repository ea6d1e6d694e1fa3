// Fault drills for the Redis client (issue #11 items 2, 3, 5, 6, and degraded start).
// Real redis-server processes and loopback fake peers; every wait is on an event with a
// generous bound, never on elapsed time.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.h"
#include "sluice/policy.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Scheduling margin on a loaded 2-core CI machine.
constexpr auto kMargin = milliseconds(1000);
constexpr auto kEventBound = std::chrono::seconds(15);

const Policy& TestPolicy() {
  static const Policy p = Policy::FixedWindow("api", 1'000'000, std::chrono::seconds(60));
  return p;
}

std::shared_ptr<RedisStore> Open(const std::string& url, Micros call_timeout,
                                 Micros connect_timeout = 1'000'000, int connections = 1) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = call_timeout;
  o.connect_timeout = connect_timeout;
  o.connections = connections;
  o.on_warning = [](std::string_view) {};
  auto s = RedisStore::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

Status EvaluateOnce(RedisStore& store, const std::string& key = "sluice:{drill}:api") {
  StoreCheck c{.policy = &TestPolicy(), .key = key, .cost = 1};
  Decision d;
  return store.Run({.checks = std::span<const StoreCheck>(&c, 1), .now = 0},
                   std::span<Decision>(&d, 1));
}

// A loopback peer that accepts and then runs `serve(fd)` for each connection.
class FakePeer {
 public:
  explicit FakePeer(std::function<void(int fd, const std::atomic<bool>& stop)> serve)
      : serve_(std::move(serve)) {
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
        serve_(c, stop_);
        close(c);
      }
    });
  }
  ~FakePeer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void(int, const std::atomic<bool>&)> serve_;
  std::atomic<bool> stop_{false};
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// Item 3: one byte every 300 ms must not stretch connect_timeout (hiredis's per-read
// timeout restarted with every byte: 1 s became 20 s and more).
TEST(ClientDrills, ConnectTimeoutBoundsTheHandshakeAgainstATricklingPeer) {
  FakePeer trickle([](int fd, const std::atomic<bool>& stop) {
    char buf[256];
    [[maybe_unused]] ssize_t r = read(fd, buf, sizeof(buf));
    // A status line that never ends, at most 30 s of it.
    for (int i = 0; i < 100 && !stop; ++i) {
      const char c = i == 0 ? '+' : 'x';
      if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(milliseconds(300));  // the peer's pace, not the test's clock
    }
  });
  RedisStoreOptions o;
  o.url = trickle.Url();
  o.connect_timeout = 1'000'000;
  const auto start = steady_clock::now();
  auto s = RedisStore::Create(o);
  const auto took = steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnavailable) << s.status().ToString();
  EXPECT_NE(s.status().message().find("did not answer PING in time"), std::string::npos)
      << s.status().ToString();
  EXPECT_LT(took, milliseconds(1000) + kMargin) << "connect_timeout bounds the whole handshake";
}

// Item 3: a reply larger than kMaxReplyBytes (8 MB), or an endless one, breaks the
// connection instead of growing memory.
TEST(ClientDrills, AnEndlessReplyBreaksTheConnection) {
  std::atomic<long long> sent{0};
  std::atomic<bool> client_closed{false};
  FakePeer endless([&](int fd, const std::atomic<bool>& stop) {
    std::string in;
    char buf[65536];
    int commands = 0;
    while (!stop) {
      const ssize_t r = read(fd, buf, sizeof(buf));
      if (r <= 0) return;
      in.append(buf, static_cast<std::size_t>(r));
      // Answer PING, then stream an endless bulk string for the first other command.
      if (in.find("PING") != std::string::npos && commands == 0) {
        commands = 1;
        in.clear();
        if (send(fd, "+PONG\r\n", 7, MSG_NOSIGNAL) != 7) return;
        continue;
      }
      if (commands == 1 && !in.empty()) {
        const std::string head = "$1000000000\r\n";
        if (send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
        std::string chunk(1 << 16, 'x');
        while (!stop && sent < (64LL << 20)) {  // bounded: 64 MB at most
          const ssize_t w = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
          if (w <= 0) {
            client_closed = true;
            return;
          }
          sent += w;
        }
        return;
      }
    }
  });
  // Degraded start skips nothing here: PING passes, then SCRIPT LOAD gets the stream.
  RedisStoreOptions o;
  o.url = endless.Url();
  o.connect_timeout = 10'000'000;
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("sent more than"), std::string::npos)
      << s.status().ToString();
  EXPECT_LT(sent.load(), 32LL << 20) << "the client stopped reading long before 32 MB";
}

// Found by the redis_reply fuzzer: an array header alone ("*2000000000") made hiredis
// allocate 16 GB of element pointers before any element arrived. The connection now
// refuses it as a protocol error, allocating nothing.
TEST(ClientDrills, AHugeArrayHeaderBreaksTheConnectionWithoutAllocating) {
  FakePeer liar([](int fd, const std::atomic<bool>& stop) {
    std::string in;
    char buf[4096];
    bool ponged = false;
    while (!stop) {
      const ssize_t r = read(fd, buf, sizeof(buf));
      if (r <= 0) return;
      in.append(buf, static_cast<std::size_t>(r));
      if (!ponged && in.find("PING") != std::string::npos) {
        ponged = true;
        in.clear();
        if (send(fd, "+PONG\r\n", 7, MSG_NOSIGNAL) != 7) return;
        continue;
      }
      if (ponged && !in.empty()) {
        const std::string head = "*2000000000\r\n";
        [[maybe_unused]] ssize_t w = send(fd, head.data(), head.size(), MSG_NOSIGNAL);
        // Keep the connection open: the client must break it, not the peer.
        while (!stop && read(fd, buf, sizeof(buf)) > 0) {
        }
        return;
      }
    }
  });
  RedisStoreOptions o;
  o.url = liar.Url();
  o.connect_timeout = 10'000'000;
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("declared more than"), std::string::npos)
      << s.status().ToString();
}

// Item 3: ~RedisStore returns at once while a background reconnect waits on a server
// that accepts but never answers (connect_timeout 30 s).
TEST(ClientDrills, DestructorReturnsPromptlyDuringAStuckReconnect) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), 50'000, 30'000'000);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(EvaluateOnce(*store).ok());
  (*server)->Pause();
  // Calls time out until the stalled connection is dropped; then they fail at once
  // (kUnavailable) while the I/O thread's reconnect hangs in the handshake.
  const auto until = steady_clock::now() + kEventBound;
  Status last;
  while (steady_clock::now() < until) {
    last = EvaluateOnce(*store);
    if (last.code() == ErrorCode::kUnavailable) break;
  }
  ASSERT_EQ(last.code(), ErrorCode::kUnavailable) << last.ToString();
  const auto start = steady_clock::now();
  store.reset();
  EXPECT_LT(steady_clock::now() - start, kMargin) << "the reconnect is abandoned";
  (*server)->Resume();
}

// Item 2: a caller that submits again from its completion callback during an outage
// must not keep the client from reconnecting (before: failures completed inline,
// the I/O thread re-submitted forever and never reconnected).
TEST(ClientDrills, ResubmittingCallbacksDoNotStarveReconnection) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), 50'000, 500'000, /*connections=*/1);
  ASSERT_NE(store, nullptr);

  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<bool> stop{false};
    std::atomic<int> phase{0};  // 0 before the kill, 1 killed, 2 restarted
    int failures_after_kill = 0, ok_after_restart = 0, running = 0;
  } sh;
  StoreCheck check{.policy = &TestPolicy(), .key = "sluice:{resubmit}:api", .cost = 1};
  std::function<void()> issue;
  issue = [&] {
    store->RunAsync({.checks = std::span<const StoreCheck>(&check, 1), .now = 0},
                    [&](const Status& s, std::span<const Decision>) {
                      {
                        std::lock_guard<std::mutex> lock(sh.mu);
                        if (!s.ok() && sh.phase == 1) ++sh.failures_after_kill;
                        if (s.ok() && sh.phase == 2) ++sh.ok_after_restart;
                        if (sh.stop) {
                          --sh.running;
                          sh.cv.notify_all();
                          return;
                        }
                        sh.cv.notify_all();
                      }
                      issue();  // straight from the callback
                    });
  };
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    sh.running = 16;
  }
  for (int i = 0; i < 16; ++i) issue();

  sh.phase = 1;
  (*server)->Stop();
  {
    std::unique_lock<std::mutex> lock(sh.mu);
    ASSERT_TRUE(sh.cv.wait_for(lock, kEventBound, [&] { return sh.failures_after_kill > 1000; }))
        << "callers see the outage";
  }
  sh.phase = 2;
  ASSERT_TRUE((*server)->Restart().ok());
  bool recovered;
  {
    std::unique_lock<std::mutex> lock(sh.mu);
    recovered = sh.cv.wait_for(lock, kEventBound, [&] { return sh.ok_after_restart > 0; });
  }
  sh.stop = true;
  {
    std::unique_lock<std::mutex> lock(sh.mu);
    EXPECT_TRUE(sh.cv.wait_for(lock, kEventBound, [&] { return sh.running == 0; }));
  }
  EXPECT_TRUE(recovered) << "decisions came back after Redis restarted";
  EXPECT_GE(store->Stats().reconnects, 1u);
}

long long ScriptCalls(RedisServer& server) {
  auto info = server.Command({"INFO", "commandstats"});
  if (!info.ok()) return -1;
  const std::string& text = info->str;
  // Redis 7 counts subcommands apart ("cmdstat_script|load"); older ones do not.
  for (const std::string key : {"cmdstat_script|load:calls=", "cmdstat_script:calls="}) {
    const std::size_t at = text.find(key);
    if (at != std::string::npos) return std::stoll(text.substr(at + key.size()));
  }
  return 0;
}

// Item 5: a reconnect (after CLIENT KILL) is connect + PING only; it does not reload
// the scripts (the server still has them; NOSCRIPT would reload one on demand), so
// the connection is back in a round trip instead of six SCRIPT LOADs.
TEST(ClientDrills, AReconnectDoesNotReloadScripts) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), 200'000, 1'000'000, /*connections=*/2);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(EvaluateOnce(*store).ok());
  const long long loads = ScriptCalls(**server);
  ASSERT_GT(loads, 0);
  auto killed = (*server)->Command({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(killed.ok());
  ASSERT_GE(killed->integer, 2) << "both connections killed";
  const auto until = steady_clock::now() + kEventBound;
  while (store->Stats().reconnects < 2 && steady_clock::now() < until) {
    (void)EvaluateOnce(*store);  // drives nothing: reconnects are the I/O thread's
    std::this_thread::yield();
  }
  ASSERT_GE(store->Stats().reconnects, 2u);
  ASSERT_TRUE(EvaluateOnce(*store).ok());
  EXPECT_EQ(ScriptCalls(**server), loads) << "no SCRIPT LOAD on reconnect";
  EXPECT_EQ(store->Stats().script_reloads, 0u);
  // And a server that did lose its scripts still answers: NOSCRIPT, load, resend.
  ASSERT_TRUE((*server)->Command({"SCRIPT", "FLUSH"}).ok());
  EXPECT_TRUE(EvaluateOnce(*store).ok());
  EXPECT_EQ(store->Stats().script_reloads, 1u);
}

// Item 6: every timeout a blocking caller sees is counted in Stats().timeouts, also
// when the reply arrives right around the deadline.
TEST(ClientDrills, EveryTimeoutACallerSeesIsCounted) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), 20'000, 1'000'000, 2);
  ASSERT_NE(store, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = "sluice:{t" + std::to_string(t) + "}:api";
      while (!stop) {
        if (EvaluateOnce(*store, key).code() == ErrorCode::kDeadlineExceeded) ++seen;
      }
    });
  }
  // Short stops (shorter than the stall bound of 1 s): replies arrive in bursts
  // around the callers' deadlines.
  for (int i = 0; i < 30; ++i) {
    (*server)->Pause();
    std::this_thread::sleep_for(milliseconds(5 + i % 30));  // fault injection pacing
    (*server)->Resume();
    std::this_thread::sleep_for(milliseconds(10));
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_GT(seen.load(), 0u);
  EXPECT_EQ(store->Stats().timeouts, seen.load());
}

// Degraded start: Create succeeds while Redis is down; calls fail at once with
// kUnavailable until the background connect succeeds.
TEST(ClientDrills, DegradedStartConnectsInTheBackground) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = (*server)->Url();
  (*server)->Stop();

  RedisStoreOptions o;
  o.url = url;
  o.require_connection = false;
  o.call_timeout = 200'000;
  o.connect_timeout = 200'000;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto start = steady_clock::now();
  const Status down = EvaluateOnce(**store);
  EXPECT_EQ(down.code(), ErrorCode::kUnavailable) << down.ToString();
  EXPECT_NE(down.message().find("not connected"), std::string::npos) << down.ToString();
  EXPECT_LT(steady_clock::now() - start, milliseconds(200) + kMargin) << "fails at once";

  ASSERT_TRUE((*server)->Restart().ok());
  const auto until = steady_clock::now() + kEventBound;
  Status s = down;
  while (!s.ok() && steady_clock::now() < until) s = EvaluateOnce(**store);
  EXPECT_TRUE(s.ok()) << s.ToString();

  // A bad URL is still refused at once.
  o.url = "redis://h:1?tls_ca=/x";
  auto bad = RedisStore::Create(o);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::testing
