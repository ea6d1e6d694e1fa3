// Redis URL parsing, and the asynchronous API a load generator uses.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>

#include "redis/url.h"
#include "store_backends.h"
#include "wait.h"

namespace sluice::testing {
namespace {

TEST(RedisUrl, ParsesEveryDocumentedForm) {
  auto u = redis::ParseUrl("redis://10.0.0.5:6380/2");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 2);
  EXPECT_TRUE(u->password.empty());

  u = redis::ParseUrl("redis://localhost");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 0);

  u = redis::ParseUrl("redis://:p%40ss%3Aword@h:1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->user, "");
  EXPECT_EQ(u->password, "p@ss:word");

  u = redis::ParseUrl("redis://alice:secret@h:1/0");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "secret");

  u = redis::ParseUrl("redis://[::1]:7000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 7000);
  EXPECT_EQ(u->Describe(), "redis://[::1]:7000");

  u = redis::ParseUrl("unix:///run/redis/redis.sock?db=4");
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->unix_socket);
  EXPECT_EQ(u->path, "/run/redis/redis.sock");
  EXPECT_EQ(u->db, 4);
}

TEST(RedisUrl, RejectsMalformedUrlsNamingThePart) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "unknown scheme"},
      {"redis//h:1", "unknown scheme"},
      {"redis://h:", "empty port"},
      {"redis://h:0", "port '0'"},
      {"redis://h:1/-1", "database '-1'"},
      {"redis://[::1:1", "unterminated IPv6"},
      {"redis://u:@h:1", "empty password"},
      {"redis://:%zz@h:1", "%-escape"},
      {"unix://", "absolute"},
      {"unix:///s?timeout=1", "db=N"},
  };
  for (const auto& [url, why] : bad) {
    auto u = redis::ParseUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_EQ(u.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(u.status().message().find(why), std::string::npos) << u.status().ToString();
  }
}

// Counts callbacks; waits (bounded) until `n` arrived.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, ok = 0, allowed = 0;
  std::map<ErrorCode, int> errors;
  RunCallback Callback() {
    return [this](const Status& s, std::span<const Decision> d) {
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      if (s.ok()) {
        ++ok;
        allowed += d[0].allowed ? 1 : 0;
      } else {
        ++errors[s.code()];
      }
      cv.notify_all();
    };
  }
  bool Wait(int n, std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, bound, [&] { return done >= n; });
  }
};

TEST(RedisAsync, ThousandsOfCallsInFlightShareTheConnections) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisStoreOptions o;
  o.url = server->Url();
  o.call_timeout = 10'000'000;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok());
  const Policy p = Policy::FixedWindow("api", 1500, std::chrono::hours(1));
  Collector c;
  constexpr int kCalls = 4000;
  for (int i = 0; i < kCalls; ++i) {
    std::string key = "sluice:{async}:api";  // dies after the call: the store copies it
    StoreCheck check{.policy = &p, .key = key, .cost = 1};
    (*store)->RunAsync({.checks = std::span<const StoreCheck>(&check, 1), .now = 0}, c.Callback());
  }
  ASSERT_TRUE(c.Wait(kCalls, std::chrono::seconds(60)));
  EXPECT_EQ(c.ok, kCalls);
  // One hour window: all calls fall in one or (at an hour boundary) two windows.
  EXPECT_TRUE(c.allowed == 1500 || (c.allowed > 1500 && c.allowed <= 3000)) << c.allowed;
  EXPECT_EQ((*store)->Stats().calls, static_cast<std::uint64_t>(kCalls));
}

TEST(RedisAsync, EveryCallbackFiresByTheDeadlineWhenRedisIsStopped) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisStoreOptions o;
  o.url = (*server)->Url();
  o.call_timeout = 100'000;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok());
  const Policy p = Policy::FixedWindow("api", 10, std::chrono::seconds(1));
  (*server)->Pause();
  Collector c;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 500; ++i) {
    StoreCheck check{.policy = &p, .key = "sluice:{k}:api", .cost = 1};
    (*store)->RunAsync({.checks = std::span<const StoreCheck>(&check, 1), .now = 0}, c.Callback());
  }
  ASSERT_TRUE(c.Wait(500, std::chrono::seconds(5))) << "every callback is called, once";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100 + 1000))
      << "bounded by the deadline, plus scheduling slack";
  EXPECT_EQ(c.ok, 0);
  EXPECT_EQ(c.errors[ErrorCode::kDeadlineExceeded], 500);

  // The 500 late replies arrive after SIGCONT and must be discarded, not handed to
  // the next callers: each of these gets the answer to its own cost.
  (*server)->Resume();
  const Policy big = Policy::FixedWindow("big", 1000, std::chrono::hours(1));
  int answered = 0;
  for (int cost = 1; cost <= 30; ++cost) {
    const std::string key = "sluice:{fresh" + std::to_string(cost) + "}:big";
    StoreCheck check{.policy = &big, .key = key, .cost = static_cast<std::uint64_t>(cost)};
    Decision d;
    Status st = (*store)->Run({.checks = std::span<const StoreCheck>(&check, 1), .now = 0},
                              std::span<Decision>(&d, 1));
    if (!st.ok()) continue;  // still catching up on the backlog: a timeout is fine
    ++answered;
    EXPECT_EQ(d.remaining, 1000u - cost) << "a reply went to the wrong caller";
  }
  EXPECT_GT(answered, 0);
}

// Makes one call whose callback holds the only reference to `store` and drops it there,
// on one of the store's own threads; the callback's status once it ran (the wait is
// bounded: kDeadlineExceeded if it never did).
Status CallDroppingTheLastReference(std::shared_ptr<Store> store) {
  const Policy p = Policy::FixedWindow("api", 10, std::chrono::hours(1));
  StoreCheck check{.policy = &p, .key = "sluice:{last}:api", .cost = 1};
  std::promise<Status> answered;
  Store* raw = store.get();
  raw->RunAsync(
      {.checks = std::span<const StoreCheck>(&check, 1), .now = 0},
      [s = std::move(store), &answered](const Status& st, std::span<const Decision>) mutable {
        s.reset();
        answered.set_value(st);
      });
  auto got = answered.get_future();
  if (got.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return Status::DeadlineExceeded("the callback did not run");
  }
  return got.get();
}

// A callback that holds the last reference to its store (a caller capturing its limiter
// does) destroys the store on one of the store's own threads, which cannot join itself:
// the teardown finishes on another thread once the callback has returned. Before that,
// this aborted the process (std::system_error from std::thread::join).
TEST(RedisAsync, ACallbackMayDropTheLastReferenceToItsStore) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int before = (*server)->ConnectedClients();
  ASSERT_GE(before, 0);
  auto store = OpenPatientStore((*server)->Url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_GT((*server)->ConnectedClients(), before);
  // (the reply comes on the connection's I/O thread)
  EXPECT_TRUE(CallDroppingTheLastReference(std::move(*store)).ok());
  EXPECT_TRUE(WaitUntil([&] { return (*server)->ConnectedClients() == before; }))
      << "the store's connections are closed: " << (*server)->ConnectedClients() << " open";
}

// The same on the store's completion thread, which reports calls that fail at once (no
// server to connect to).
TEST(RedisAsync, AFailureCallbackMayDropTheLastReferenceToItsStore) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = (*server)->Url();
  (*server)->Stop();
  RedisStoreOptions o;
  o.url = url;
  o.require_connection = false;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(CallDroppingTheLastReference(std::move(*store)).code(), ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::testing
