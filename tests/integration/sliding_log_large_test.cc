// Issue #11, item 4: a denied sliding-log request with a large cost against a large log
// must cost Redis O(log n), not a walk over the log. The answer is checked against the
// reference model; the work is counted in Redis's own command statistics (ZRANGE calls
// made by the script), not timed. The script's time (SLOWLOG) and the memory per entry
// (MEMORY USAGE) are printed for docs/redis.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>

#include "reference_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

TEST(SlidingLogLarge, DeniedLargeCostIsDecidedWithoutWalkingTheLog) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisStoreOptions o;
  o.url = server->Url();
  o.use_caller_time = true;
  o.call_timeout = 30'000'000;
  o.connect_timeout = 30'000'000;  // a loaded CI machine: behaviour, not speed
  o.connections = 1;
  o.on_warning = [](std::string_view) {};
  auto created = RedisStore::Create(std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  RedisStore& redis = **created;
  ReferenceStore reference;

  const Policy p = Policy::SlidingWindowLog("big", 1'000'000, std::chrono::hours(1));
  const std::string key = "sluice:{big}:big";
  // 300,000 entries of cost 1, 16 per call (one key checked 16 times in a batch adds 16
  // entries), at 18,750 successive microseconds: ties within a call, order across calls.
  constexpr int kCalls = 18'750;
  StoreCheck batch[kMaxBatchChecks];
  for (StoreCheck& c : batch) c = StoreCheck{.policy = &p, .key = key, .cost = 1};
  Decision a[kMaxBatchChecks], b[kMaxBatchChecks];
  // Pipelined on the one connection (so in order), 1024 calls at a time.
  for (int first = 0; first < kCalls; first += 1024) {
    const int n = std::min(1024, kCalls - first);
    auto done = std::make_shared<std::atomic<int>>(0);
    auto allowed = std::make_shared<std::atomic<int>>(0);
    auto mu = std::make_shared<std::mutex>();
    auto cv = std::make_shared<std::condition_variable>();
    for (int i = first; i < first + n; ++i) {
      ASSERT_TRUE(reference.Run({.checks = batch, .now = kNoon + i}, a).ok());
      redis.RunAsync({.checks = batch, .now = kNoon + i},
                     [=](const Status& s, std::span<const Decision> d) {
                       if (s.ok() && d.size() == 16 && d[0].allowed) allowed->fetch_add(1);
                       std::lock_guard<std::mutex> lock(*mu);
                       done->fetch_add(1);
                       cv->notify_all();
                     });
    }
    std::unique_lock<std::mutex> lock(*mu);
    ASSERT_TRUE(cv->wait_for(lock, std::chrono::seconds(120), [&] { return *done == n; }));
    ASSERT_EQ(allowed->load(), n);
  }
  const Micros now = kNoon + 3'600'000'000LL / 2;  // half an hour later: all still inside

  // Costs whose excess lands on the oldest entry, in the middle, on the newest, and a
  // peek; each answer exactly the reference model's.
  for (std::uint64_t cost : {700'001ULL, 850'000ULL, 999'999ULL, 1'000'000ULL, 0ULL}) {
    const StoreCheck c{.policy = &p, .key = key, .cost = cost};
    ASSERT_TRUE(reference.Run({.checks = {&c, 1}, .now = now}, a).ok());
    ASSERT_TRUE(redis.Run({.checks = {&c, 1}, .now = now}, b).ok());
    EXPECT_EQ(a[0].allowed, b[0].allowed) << cost;
    EXPECT_EQ(a[0].remaining, b[0].remaining) << cost;
    EXPECT_EQ(a[0].retry_after, b[0].retry_after) << cost;
    EXPECT_EQ(a[0].reset_after, b[0].reset_after) << cost;
  }
  // By hand: cost 1,000,000 needs all 300,000 units gone; the last 16 were logged at
  // kNoon + 18,749 us, so it can pass one window after that.
  const StoreCheck all{.policy = &p, .key = key, .cost = 1'000'000};
  ASSERT_TRUE(redis.Run({.checks = {&all, 1}, .now = now}, b).ok());
  EXPECT_FALSE(b[0].allowed);
  EXPECT_EQ(b[0].retry_after, kNoon + (kCalls - 1) + 3'600'000'000LL - now);

  // The work: ZRANGE calls made by the script for one such denial (a walk in pages of
  // 64 made 4,688 of them; a binary search over ranks about 20).
  ASSERT_TRUE(server->Command({"CONFIG", "RESETSTAT"}).ok());
  ASSERT_TRUE(server->Command({"CONFIG", "SET", "slowlog-log-slower-than", "0"}).ok());
  ASSERT_TRUE(server->Command({"SLOWLOG", "RESET"}).ok());
  ASSERT_TRUE(redis.Run({.checks = {&all, 1}, .now = now}, b).ok());
  auto slow = server->Command({"SLOWLOG", "GET", "1"});
  ASSERT_TRUE(server->Command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"}).ok());
  const long long zrange = server->CommandCalls("zrange");
  EXPECT_GT(zrange, 0);
  EXPECT_LE(zrange, 64) << "the denied decision read the log in " << zrange << " ZRANGE calls";
  if (slow.ok() && !slow->elements.empty() && slow->elements[0].elements.size() > 2) {
    std::printf("denied cost 1000000 over 300000 entries: script %lld us, %lld ZRANGE calls\n",
                slow->elements[0].elements[2].integer, zrange);
  }
  auto bytes = server->Command({"MEMORY", "USAGE", key + ":log", "SAMPLES", "0"});
  ASSERT_TRUE(bytes.ok());
  std::printf("MEMORY USAGE of the 300000-entry log: %lld bytes, %.1f per entry\n", bytes->integer,
              static_cast<double>(bytes->integer) / 300'000.0);
}

// Logs written before the running-sum layout ("<count>:<cost>" members) are still
// decided exactly (by the walk) until they expire, also once new entries are appended.
TEST(SlidingLogLarge, OlderLayoutIsStillReadExactly) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisStoreOptions o;
  o.url = server->Url();
  o.use_caller_time = true;
  o.call_timeout = 30'000'000;
  o.connect_timeout = 30'000'000;
  o.on_warning = [](std::string_view) {};
  auto redis = RedisStore::Create(std::move(o));
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ReferenceStore reference;
  const Policy p = Policy::SlidingWindowLog("old", 200, std::chrono::seconds(1));
  const std::string key = "sluice:{old}:old";
  std::uint64_t used = 0;
  Micros ts = 0;
  Decision a[1], b[1];
  for (int i = 1; i <= 50; ++i) {
    ts = kNoon + i * 1000;
    const std::uint64_t cost = 1 + i % 3;
    const StoreCheck c{.policy = &p, .key = key, .cost = cost};
    ASSERT_TRUE(reference.Run({.checks = {&c, 1}, .now = ts}, a).ok());
    ASSERT_TRUE(server
                    ->Command({"ZADD", key + ":log", std::to_string(ts),
                               std::to_string(i) + ":" + std::to_string(cost)})
                    .ok());
    used += cost;
  }
  ASSERT_TRUE(server
                  ->Command({"SET", key,
                             "1 " + std::to_string(ts + p.window) + " " + std::to_string(ts) + " " +
                                 std::to_string(used) + " 50",
                             "PX", "3600000"})
                  .ok());
  ASSERT_TRUE(server->Command({"PEXPIRE", key + ":log", "3600000"}).ok());
  Micros now = kNoon + 60'000;
  for (int round = 0; round < 3; ++round) {
    for (std::uint64_t cost : {200ULL, 150ULL, 101ULL, 0ULL, 7ULL}) {
      const StoreCheck c{.policy = &p, .key = key, .cost = cost};
      ASSERT_TRUE(reference.Run({.checks = {&c, 1}, .now = now}, a).ok());
      ASSERT_TRUE((*redis)->Run({.checks = {&c, 1}, .now = now}, b).ok());
      EXPECT_EQ(a[0].allowed, b[0].allowed) << round << " " << cost;
      EXPECT_EQ(a[0].remaining, b[0].remaining) << round << " " << cost;
      EXPECT_EQ(a[0].retry_after, b[0].retry_after) << round << " " << cost;
      EXPECT_EQ(a[0].reset_after, b[0].reset_after) << round << " " << cost;
      now += 37'000;
    }
  }
}

}  // namespace
}  // namespace sluice::testing
