// Coalesced calls (issue #9 item 3, docs/redis.md "Coalesced calls"): several callers'
// independent batches queued on one connection at once leave as ONE script call, each
// batch decided all or nothing on its own and answered on its own.
//
// How the tests make calls queue together without timing: the calls are submitted from
// inside a callback that runs on the connection's I/O thread (connections = 1), so
// every one of them is queued before that thread takes its queue again. The store's
// counters (coalesced_calls, coalesced_evaluations) then prove they did share a call.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <set>

#include "burst.h"
#include "coalesce_differential.h"
#include "previous_layouts.h"
#include "redis/node_client.h"
#include "redis/script_wire.h"
#include "redis/scripts.h"
#include "redis/url.h"
#include "reference_store.h"
#include "sluice/key.h"
#include "sluice/permit_id.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

TEST(CoalesceDifferential, RandomInterleavingsOfIndependentBatches) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  ExpectRandomInterleavingsAsModel(*redis, *SharedRedis(), /*batch=*/false, /*module=*/false);
}

// The same with blocks, penalties, overage charges, usage records and permits: a batch
// with a check of a policy with block_for or an overage, a usage record or a permit's
// operation, and a penalty, share the batch script's merged calls (the coalesced script
// has none of them), decided as the model's. (The module's twin:
// ModuleStore.MergedCallsOfEveryKindMatchTheModel.)
TEST(CoalesceDifferential, RandomInterleavingsWithBlocksAndPenalties) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  ExpectRandomInterleavingsAsModel(*redis, *SharedRedis(), /*batch=*/true, /*module=*/false);
}

// What a lean lane's differential test (below) varies.
struct LeanBursts {
  redis::LeanLane lane;
  Policy trigger;      // the trigger's call (Burst), in that lane
  std::string prefix;  // of the keys
  // Four policies of the lane, at random.
  std::function<std::vector<Policy>(std::mt19937_64&, std::uint64_t seed)> policies;
  // Rewrites `key` (under `p`, at `now`) in an earlier layout; whether it did.
  std::function<bool(RedisServer&, const std::string& key, const Policy& p, Micros now)> downgrade;
};

// Random bursts of batches of the lane's checks only (3 seeds: few keys, mostly live
// states, to many, mostly fresh; peeks, costs up to the capacity, denials, multi-check
// batches, time moving forward, and in seed 3 one-check batches with time now and then
// going back), keys rewritten at random between bursts in an earlier layout, each burst
// decided in ONE call of the lane's lean script when it has two or more batches (one
// batch: that script for two or more checks, the one-check script for one), against the
// reference model deciding the same batches one after the other.
void ExpectLeanBurstsAsModel(const LeanBursts& spec) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  RecordEveryCommand(*server);
  int compared = 0, denied = 0, downgraded = 0;
  std::uint64_t expected_calls = 0;
  std::set<std::string> singles_sha;  // the one-check scripts of the lane's algorithms
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::mt19937_64 rng(seed);
    // (MemoryStore never lets its own time go back: the plain reference model of the
    // algorithms takes every `now` as given, as Redis's states do)
    ReferenceStore memory;
    const std::vector<Policy> policies = spec.policies(rng, seed);
    for (const Policy& p : policies) {
      ASSERT_TRUE(ValidatePolicy(p).ok()) << p.name;
      singles_sha.insert(std::string(redis::SingleCheckScript(p.algorithm).sha));
    }
    const int callers = seed == 1 ? 3 : seed == 2 ? 15 : 75;
    std::vector<std::string> keys;
    for (int c = 0; c < callers; ++c) {
      for (const Policy& p : policies)
        keys.push_back(
            *StoreKey(spec.prefix + std::to_string(seed), "c" + std::to_string(c), p.name));
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int burst = 0; burst < 50; ++burst) {
      const Policy& tp = policies[rng() % policies.size()];
      now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
      const bool singles = seed == 3;
      if (singles && rng() % 6 == 0) now -= static_cast<Micros>(rng() % (2 * tp.window));
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (rng() % 4 == 0)
          downgraded += spec.downgrade(*server, keys[i], policies[i % policies.size()], now);
      }
      const std::size_t ngroups = rng() % 2 ? 8 + rng() % 9 : 1 + rng() % 7;
      std::vector<Group> groups(ngroups);
      for (Group& g : groups) {
        if (rng() % 3 == 0) now += static_cast<Micros>(rng() % 2000);
        g.now = now;
        AddRandomChecks(rng, g, singles ? 1 : 1 + rng() % 3, keys, policies);
        ASSERT_EQ(LaneOf(g.checks), spec.lane);
      }
      const auto before = redis->Stats();
      const std::vector<Outcome> got = Burst(*redis, spec.trigger, groups, now);
      const auto after = redis->Stats();
      const bool merged = ngroups >= 2;  // (the lean scripts' lanes: from 2 on)
      expected_calls += merged ? 1 : 0;
      ASSERT_EQ(after.coalesced_calls - before.coalesced_calls, merged ? 1u : 0u)
          << "seed " << seed << " burst " << burst;
      ExpectBurstAsModel(memory, groups, got, {},
                         "seed " + std::to_string(seed) + " burst " + std::to_string(burst), denied,
                         compared);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(redis->Stats().coalesced_calls, expected_calls);
  EXPECT_GT(expected_calls, 100u);  // most bursts were merged
  EXPECT_GT(denied, 50);            // and the denials were compared too
  EXPECT_GT(downgraded, 50);        // and keys in an earlier layout were decided
  EXPECT_GT(compared, 3 * 50 * 3);
  // The calls were the lane's lean script's, or for one check the one-check scripts'
  // (SLOWLOG keeps each command's arguments: EVALSHA <sha> ...), never the coalesced or
  // the batch script's.
  int lean = 0, single = 0, other = 0;
  for (const auto& [sha, n] : ScriptCalls(*server)) {
    if (sha == redis::LeanScript(spec.lane).sha) {
      lean += n;
    } else if (singles_sha.count(sha) > 0) {
      single += n;
    } else {
      other += n;
    }
  }
  EXPECT_GT(lean, 100);
  EXPECT_GT(single, 50);
  EXPECT_EQ(other, 0);
  ExpectEveryKeyHasATtl(*server);
}

// Differential, the lean fixed-window script (lua/lean_fixed_window.lua), as
// ExpectLeanBurstsAsModel: keys rewritten in the layout before issue #18 (a rolling
// upgrade: the script decides those with fixed_window.lua's body). (In seed 3, where
// the clock goes back, a batch denied by another check would leave a fresh window's
// counter at 0, docs/redis.md "The native module": read later from an earlier window,
// its reset_after is that later window's, where the model, which wrote nothing, answers
// with the earlier window's; seed 3's batches have one check.)
TEST(CoalesceDifferential, FixedWindowBurstsRunTheLeanScript) {
  ExpectLeanBurstsAsModel(
      {.lane = redis::LeanLane::kFixedWindow,
       .trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1)),
       .prefix = "lf",
       .policies =
           [](std::mt19937_64& rng, std::uint64_t) {
             static const Micros kWindows[] = {250'000, 1'000'000, 3'300'000, 60'000'000};
             static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 100};
             std::vector<Policy> out;
             for (int i = 0; i < 4; ++i) {
               out.push_back(Policy::FixedWindow(
                   "f" + std::to_string(i), kLimits[rng() % std::size(kLimits)],
                   std::chrono::microseconds(kWindows[rng() % std::size(kWindows)])));
             }
             return out;
           },
       .downgrade =
           [](RedisServer& server, const std::string& key, const Policy& p, Micros now) {
             return DowngradeFixedWindow(server, key, now - now % p.window, p.window);
           }});
}

// Differential, the lean bucket script (lua/lean_bucket.lua), as ExpectLeanBurstsAsModel:
// GCRA, token-bucket and sliding-counter policies (batches mix them), GCRA keys rewritten
// in the layout before issue #9 (a rolling upgrade: the script decides those with
// gcra.lua's body).
TEST(CoalesceDifferential, BucketBurstsRunTheLeanScript) {
  ExpectLeanBurstsAsModel(
      {.lane = redis::LeanLane::kBucket,
       .trigger = Policy::Gcra("t", 1000, std::chrono::hours(1), 1000),
       .prefix = "lg",
       .policies =
           [](std::mt19937_64& rng, std::uint64_t seed) {
             static const Micros kWindows[] = {1'000, 250'000, 1'000'000, 3'300'000, 60'000'000};
             static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 100, 1000};
             std::vector<Policy> out;
             for (int i = 0; i < 4; ++i) {
               const std::uint64_t limit = kLimits[rng() % std::size(kLimits)];
               const std::chrono::microseconds window(kWindows[rng() % std::size(kWindows)]);
               const std::uint64_t capacity = 1 + rng() % (3 * limit);
               const std::string name = std::to_string(i);
               out.push_back(i == 0   ? Policy::Gcra("g" + name, limit, window, capacity)
                             : i == 2 ? Policy::SlidingWindowCounter("c" + name, limit, window)
                                      : Policy::TokenBucket("b" + name, capacity, limit, window));
               // (a bucket that starts full, the lean script's; or as full as it holds)
               if (i == 3 && seed == 2) out.back().initial_tokens = capacity;
             }
             return out;
           },
       .downgrade =
           [](RedisServer& server, const std::string& key, const Policy& p, Micros) {
             return p.algorithm == Algorithm::kGcra && DowngradeGcra(server, key);
           }});
}

// One batch of a coalesced call denies: it consumes nothing (all or nothing), and the
// batches around it, one of them on a key the denied batch also checks, are decided
// and consumed as if it were not there. On Redis's clock (production mode).
TEST(Coalesce, OneBatchDeniesTheOthersAreUnaffected) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  const Policy p = Policy::FixedWindow("fw", 5, std::chrono::hours(1));
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  const std::string shared = "sluice:{shared}:fw", full = "sluice:{full}:fw",
                    other = "sluice:{other}:fw";
  {  // exhaust `full`
    const StoreCheck take{.policy = &p, .key = full, .cost = 5};
    Decision d;
    ASSERT_TRUE(
        redis->Run({.checks = std::span<const StoreCheck>(&take, 1), .now = 0}, {&d, 1}).ok());
    ASSERT_TRUE(d.allowed);
  }
  std::vector<std::string> fillers;  // enough batches to be merged (8)
  for (int i = 0; i < 5; ++i) fillers.push_back("sluice:{filler" + std::to_string(i) + "}:fw");
  std::vector<Group> groups(8);
  groups[0].checks = {StoreCheck{.policy = &p, .key = shared, .cost = 2}};
  groups[1].checks = {StoreCheck{.policy = &p, .key = shared, .cost = 1},
                      StoreCheck{.policy = &p, .key = full, .cost = 1}};  // denies
  groups[2].checks = {StoreCheck{.policy = &p, .key = other, .cost = 3}};
  for (int i = 0; i < 5; ++i)
    groups[3 + i].checks = {StoreCheck{.policy = &p, .key = fillers[i], .cost = 1}};
  const auto before = redis->Stats();
  const std::vector<Outcome> got = Burst(*redis, trigger, groups, 0);
  const auto after = redis->Stats();
  EXPECT_EQ(after.coalesced_calls - before.coalesced_calls, 1u);
  EXPECT_EQ(after.coalesced_evaluations - before.coalesced_evaluations, 8u);
  for (const Outcome& o : got) ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  for (int i = 3; i < 8; ++i) EXPECT_EQ(got[i].decisions[0].remaining, 4u) << i;
  EXPECT_TRUE(got[0].decisions[0].allowed);
  EXPECT_EQ(got[0].decisions[0].remaining, 3u);
  EXPECT_TRUE(got[1].decisions[0].allowed);   // this check alone would pass ...
  EXPECT_FALSE(got[1].decisions[1].allowed);  // ... but the batch is denied
  EXPECT_TRUE(got[2].decisions[0].allowed);
  EXPECT_EQ(got[2].decisions[0].remaining, 2u);
  // What is left: `shared` lost only the first batch's 2, `full` nothing more.
  const StoreCheck peeks[] = {{.policy = &p, .key = shared, .cost = 0},
                              {.policy = &p, .key = full, .cost = 0},
                              {.policy = &p, .key = other, .cost = 0}};
  Decision left[3];
  ASSERT_TRUE(redis->Run({.checks = peeks, .now = 0}, left).ok());
  EXPECT_EQ(left[0].remaining, 3u);
  EXPECT_EQ(left[1].remaining, 0u);
  EXPECT_EQ(left[2].remaining, 2u);
  RedisServer* server = SharedRedis();
  for (const std::string& k : {shared, full, other}) {
    auto ttl = server->Command({"PTTL", k});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k;
  }
}

// A server that lost its scripts (restart, SCRIPT FLUSH) answers the merged call with
// NOSCRIPT, which proves nothing ran: the connection loads the grouped script and
// sends the merged call again, once; every caller is answered.
TEST(Coalesce, AMergedCallSurvivesAScriptFlush) {
  // The coalesced script's calls (GCRA) and the lean fixed-window script's.
  for (const Policy& p : {Policy::Gcra("g", 10, std::chrono::minutes(1), 10),
                          Policy::FixedWindow("f", 10, std::chrono::minutes(1))}) {
    SCOPED_TRACE(p.name);
    auto redis = CoalescingStore(/*caller_time=*/false);
    ASSERT_NE(redis, nullptr);
    const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
    {  // the trigger's own script is loaded again on its first call
      const StoreCheck t{.policy = &trigger, .key = "sluice:{warm}:t", .cost = 0};
      Decision d;
      ASSERT_TRUE(
          redis->Run({.checks = std::span<const StoreCheck>(&t, 1), .now = 0}, {&d, 1}).ok());
    }
    ASSERT_TRUE(SharedRedis()->Command({"SCRIPT", "FLUSH"}).ok());
    std::vector<std::string> keys;
    for (int i = 0; i < 8; ++i) keys.push_back("sluice:{flush" + std::to_string(i) + "}:" + p.name);
    std::vector<Group> groups(8);
    for (int i = 0; i < 8; ++i)
      groups[i].checks = {StoreCheck{.policy = &p, .key = keys[i], .cost = 1}};
    const auto before = redis->Stats();
    const std::vector<Outcome> got = Burst(*redis, trigger, groups, 0);
    const auto after = redis->Stats();
    EXPECT_EQ(after.coalesced_calls - before.coalesced_calls, 1u);
    EXPECT_GE(after.script_reloads - before.script_reloads, 1u);
    for (const Outcome& o : got) {
      ASSERT_TRUE(o.status.ok()) << o.status.ToString();
      EXPECT_TRUE(o.decisions[0].allowed);
      EXPECT_EQ(o.decisions[0].remaining, 9u);
    }
  }
}

// Coalescing off (coalesce = 1): the same burst leaves as one call per caller.
TEST(Coalesce, OffSendsOneCallPerCaller) {
  auto redis = CoalescingStore(/*caller_time=*/false, /*coalesce=*/1);
  ASSERT_NE(redis, nullptr);
  const Policy p = Policy::FixedWindow("fw", 5, std::chrono::hours(1));
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("sluice:{off" + std::to_string(i) + "}:fw");
  std::vector<Group> groups(8);
  for (int i = 0; i < 8; ++i)
    groups[i].checks = {StoreCheck{.policy = &p, .key = keys[i], .cost = 1}};
  const std::vector<Outcome> got = Burst(*redis, trigger, groups, 0);
  for (const Outcome& o : got) ASSERT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(redis->Stats().coalesced_calls, 0u);
  EXPECT_EQ(redis->Stats().calls, 9u);  // the trigger and each caller's own
}

// Fewer batches than kMinCoalescedBatches (8) queued together are not worth a coalesced
// call: each is sent with its own lean script. Calls of plain fixed-window checks merge
// from two on (kMinLeanBatches): the lean scripts have no fixed cost to outweigh.
TEST(Coalesce, FewBatchesAreSentAsTheyAre) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  // (a token bucket that starts below its capacity: no lean lane, so the coalesced
  // script's, which waits for kMinCoalescedBatches; alone, its one-check script)
  Policy p = Policy::TokenBucket("tb", 5, 5, std::chrono::hours(1));
  p.initial_tokens = 4;
  ASSERT_TRUE(ValidatePolicy(p).ok());
  const Policy fw = Policy::FixedWindow("fw", 5, std::chrono::hours(1));
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  std::vector<std::string> keys;
  for (int i = 0; i < 9; ++i) keys.push_back("sluice:{few" + std::to_string(i) + "}:x");
  std::vector<Group> groups(9);
  for (int i = 0; i < 7; ++i)
    groups[i].checks = {StoreCheck{.policy = &p, .key = keys[i], .cost = 1}};
  for (int i = 7; i < 9; ++i)
    groups[i].checks = {StoreCheck{.policy = &fw, .key = keys[i], .cost = 1}};
  const std::vector<Outcome> got = Burst(*redis, trigger, groups, 0);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.ToString();
    EXPECT_EQ(got[i].decisions[0].remaining, i < 7 ? 3u : 4u) << i;
  }
  EXPECT_EQ(redis->Stats().coalesced_calls, 1u);        // the two fixed windows'
  EXPECT_EQ(redis->Stats().coalesced_evaluations, 2u);  // (the seven others: one each)
}

// The lean bucket script writes a lone sliding-counter check first while the call's keys
// have been mostly fresh, and reads first once they are mostly live (its `lead`): a burst
// on eight fresh keys is eight SET ... GETs and no GET; the same burst again, on the now
// live keys, writes first only for its first check (SET ... GET, then the SET of the
// state decided on what it replaced) and reads the seven others (GET, then a SETRANGE of
// the count). The trigger of each burst, a fixed-window peek, is one GET.
TEST(Coalesce, SlidingCounterWritesFirstOnlyWhileKeysAreFresh) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const Policy p = Policy::SlidingWindowCounter("swc", 5, std::chrono::hours(1));
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("sluice:{sc" + std::to_string(i) + "}:swc");
  std::vector<Group> groups(8);
  for (int i = 0; i < 8; ++i) groups[i].checks = {StoreCheck{.policy = &p, .key = keys[i]}};
  struct Counts {
    long long set, get, setrange;
  } const expected[2] = {{8, 1, 0}, {2, 8, 7}};
  for (int burst = 0; burst < 2; ++burst) {
    const long long set0 = server->CommandCalls("set"), get0 = server->CommandCalls("get"),
                    range0 = server->CommandCalls("setrange");
    for (const Outcome& o : Burst(*redis, trigger, groups, 0)) {
      ASSERT_TRUE(o.status.ok()) << o.status.ToString();
      EXPECT_TRUE(o.decisions[0].allowed);
      EXPECT_EQ(o.decisions[0].remaining, burst == 0 ? 4u : 3u) << "burst " << burst;
    }
    EXPECT_EQ(server->CommandCalls("set") - set0, expected[burst].set) << "burst " << burst;
    EXPECT_EQ(server->CommandCalls("get") - get0, expected[burst].get) << "burst " << burst;
    EXPECT_EQ(server->CommandCalls("setrange") - range0, expected[burst].setrange)
        << "burst " << burst;
  }
  EXPECT_EQ(redis->Stats().coalesced_calls, 2u);
}

TEST(Coalesce, BadOptionIsRefused) {
  RedisStoreOptions o;
  o.coalesce = 0;
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("coalesce"), std::string::npos) << s.status().message();
}

// The connection level (redis::NodeClient, one connection to the shared test server,
// flushed), where each caller's deadline is explicit, and the calls it may merge:
// one-check fixed-window calls (limit 10 per hour, cost 1) on Redis's clock, with the
// store's own encoders (redis/script_wire.h), merged into the coalesced script's calls
// of 2 to `max_groups` groups.
class OneConnection {
 public:
  explicit OneConnection(std::size_t max_groups = 8)
      : target_{redis::CoalescedScript().sha,
                redis::CoalescedScript().source,
                max_groups,
                2,
                [](const std::vector<const redis::CoalesceInfo*>& groups, std::string& out) {
                  return redis::EncodeCoalesced(/*caller_time=*/false, groups, out);
                },
                redis::DecisionSize} {
    server_ = SharedRedis();
    if (server_ == nullptr) return;
    EXPECT_TRUE(server_->Command({"FLUSHALL"}).ok());
    auto url = redis::ParseUrl(server_->Url());
    EXPECT_TRUE(url.ok()) << url.status().ToString();
    if (!url.ok()) return;
    redis::NodeOptions no;
    no.connect.handshake.url = *url;
    no.connect.handshake.scripts = redis::AllScripts();
    no.connections = 1;
    auto node = redis::NodeClient::Create(no, stats_);
    EXPECT_TRUE(node.ok()) << node.status().ToString();
    if (node.ok()) node_ = std::move(*node);
  }
  OneConnection(const OneConnection&) = delete;
  OneConnection& operator=(const OneConnection&) = delete;

  // Null when the server or the connection could not start (a test failure said why).
  RedisServer* server() const { return node_ ? server_ : nullptr; }
  redis::NodeClient& node() { return *node_; }
  const redis::ConnectionStats& stats() const { return *stats_; }
  // A one-check fixed-window call on `key`, mergeable.
  redis::Command Call(const std::string& key) const {
    const StoreCheck check{.policy = &policy_, .key = key, .cost = 1};
    redis::CoalesceInfo info;
    std::string wire = redis::EncodeSingle(single_, check, 0, /*caller_time=*/false, info);
    info.target = &target_;
    return redis::Command{std::move(wire), single_.source, std::move(info)};
  }
  // Whether `key` exists on the server (a call on it ran).
  bool Exists(const std::string& key) const {
    auto r = server_->Command({"EXISTS", key});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->integer == 1;
  }

 private:
  const redis::CoalesceTarget target_;
  const redis::Script& single_ = redis::SingleCheckScript(Algorithm::kFixedWindow);
  const Policy policy_ = Policy::FixedWindow("fw", 10, std::chrono::hours(1));
  std::shared_ptr<redis::ConnectionStats> stats_ = std::make_shared<redis::ConnectionStats>();
  RedisServer* server_ = nullptr;
  std::unique_ptr<redis::NodeClient> node_;
};

// The answers to OneConnection::Call calls, by index: status, and the decision's
// remaining count (-1: none).
struct Answers {
  explicit Answers(std::size_t n) : status(n, Status::Internal("not answered")), remaining(n, -1) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> status;
  std::vector<long long> remaining;
  std::size_t answered = 0;

  std::size_t Answered() {
    std::lock_guard<std::mutex> lock(mu);
    return answered;
  }
  // Waits (bounded) until `n` calls are answered.
  bool WaitFor(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return answered >= n; });
  }
};

// The callback that records call `i`'s answer in `a`.
redis::ReplyCallback Record(std::shared_ptr<Answers> a, std::size_t i) {
  return [a, i](const Status& s, const redisReply* r) {
    std::lock_guard<std::mutex> lock(a->mu);
    a->status[i] = s;
    const std::uint64_t capacity = 10;
    Decision d;
    // (a merged call's part is an array; a call of its own may be one packed integer)
    if (s.ok() && redis::DecodeDecisions(*r, 1, &capacity, &d).ok()) {
      a->remaining[i] = static_cast<long long>(d.remaining);
    }
    ++a->answered;
    a->cv.notify_all();
  };
}

TEST(CoalesceConnection, ACallerWhoseDeadlinePassedInTheQueueTimesOutAlone) {
  // A caller whose deadline passes while its call waits in the queue gets
  // DeadlineExceeded and is not sent at all; the callers queued with it still share one
  // call and succeed.
  OneConnection c;
  RedisServer* server = c.server();
  ASSERT_NE(server, nullptr);
  auto answers = std::make_shared<Answers>(3);
  redis::NodeClient& n = c.node();
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  n.Send(redis::Command{redis::EncodeCommand({"PING"}), {}}, far,
         [&, answers](const Status& s, const redisReply*) {
           EXPECT_TRUE(s.ok());
           // On the I/O thread: all three are queued before it takes its queue.
           n.Send(c.Call("sluice:{a}:fw"), far, Record(answers, 0));
           n.Send(c.Call("sluice:{late}:fw"), redis::SteadyClock::now() - std::chrono::seconds(1),
                  Record(answers, 1));
           n.Send(c.Call("sluice:{c}:fw"), far, Record(answers, 2));
         });
  ASSERT_TRUE(answers->WaitFor(3));
  EXPECT_TRUE(answers->status[0].ok()) << answers->status[0].ToString();
  EXPECT_EQ(answers->remaining[0], 9);
  EXPECT_EQ(answers->status[1].code(), ErrorCode::kDeadlineExceeded)
      << answers->status[1].ToString();
  EXPECT_TRUE(answers->status[2].ok()) << answers->status[2].ToString();
  EXPECT_EQ(answers->remaining[2], 9);
  EXPECT_EQ(c.stats().coalesced_calls.load(), 1u);
  EXPECT_EQ(c.stats().coalesced_groups.load(), 2u);
  EXPECT_FALSE(c.Exists("sluice:{late}:fw"));  // the late caller's call never ran
  auto ttl = server->Command({"PTTL", "sluice:{a}:fw"});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 0);
}

// Group commit (connection.h, Connection::Hold), made observable without timing: the
// server postpones scripts (CLIENT PAUSE WRITE) until the test resumes it, so a script
// call sent first stays in flight; the PINGs sent behind it are not answered either, so
// each times out at its deadline (kTurn; one sent in the same write as that call, ahead
// of it, is answered): its callback, on the I/O thread, runs the test's next step in a
// later turn of that thread than the step before. So each step's calls are taken from
// the queue on their own, while the first call is in flight.
constexpr Micros kTurn = 20'000;  // (how long a turn lasts does not change what it proves)

// Scripts wait on `server` (CLIENT PAUSE WRITE) from construction to Resume (or
// destruction).
class PausedScripts {
 public:
  explicit PausedScripts(RedisServer& server) : server_(server) {
    auto r = server_.Command({"CLIENT", "PAUSE", "60000", "WRITE"});
    ok_ = r.ok() && !r->is_error();
  }
  ~PausedScripts() { Resume(); }
  PausedScripts(const PausedScripts&) = delete;
  PausedScripts& operator=(const PausedScripts&) = delete;
  bool ok() const { return ok_; }
  void Resume() {
    if (!ok_) return;
    ok_ = false;
    EXPECT_TRUE(server_.Command({"CLIENT", "UNPAUSE"}).ok());
  }

 private:
  RedisServer& server_;
  bool ok_ = false;
};

// Runs `steps` one after the other on `n`'s I/O thread, each in its own turn (above), and
// returns once the last step's calls were taken too (one more turn), or after a generous
// bound (false). Steps stop when the connection is lost.
bool RunInTurns(redis::NodeClient& n, std::vector<std::function<void()>> steps) {
  struct Turns {
    std::vector<std::function<void()>> steps;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto t = std::make_shared<Turns>();
  t->steps = std::move(steps);
  // Turn `i`: a PING whose callback runs step i and starts turn i + 1.
  auto turn = std::make_shared<std::function<void(std::size_t)>>();
  *turn = [&n, t, weak = std::weak_ptr(turn)](std::size_t i) {
    n.Send(redis::Command{redis::EncodeCommand({"PING"}), {}}, redis::DeadlineAfter(kTurn),
           [t, weak, i](const Status& s, const redisReply*) {
             auto next = weak.lock();
             if (next && s.code() != ErrorCode::kUnavailable && i < t->steps.size()) {
               t->steps[i]();
               (*next)(i + 1);
               return;
             }
             std::lock_guard<std::mutex> lock(t->mu);
             t->done = true;
             t->cv.notify_all();
           });
  };
  (*turn)(0);
  std::unique_lock<std::mutex> lock(t->mu);
  return t->cv.wait_for(lock, std::chrono::seconds(60), [&] { return t->done; });
}

// Calls queued one by one while a mergeable call is in flight wait for its reply, then
// leave together as ONE merged call.
TEST(GroupCommit, CallsQueuedWhileOneIsInFlightLeaveAsOneCallWhenItsReplyArrives) {
  OneConnection c;
  ASSERT_NE(c.server(), nullptr);
  redis::NodeClient& n = c.node();
  auto answers = std::make_shared<Answers>(4);
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  PausedScripts paused(*c.server());
  ASSERT_TRUE(paused.ok());
  n.Send(c.Call("sluice:{first}:fw"), far, Record(answers, 0));  // nothing in flight: sent
  std::vector<std::function<void()>> steps;
  for (std::size_t i = 1; i <= 3; ++i) {
    steps.push_back([&c, &n, answers, far, i] {
      n.Send(c.Call("sluice:{later" + std::to_string(i) + "}:fw"), far, Record(answers, i));
    });
  }
  ASSERT_TRUE(RunInTurns(n, std::move(steps)));
  EXPECT_EQ(c.stats().coalesced_calls.load(), 0u);  // held (or sent alone, before #18's hold)
  EXPECT_EQ(answers->Answered(), 0u);
  paused.Resume();
  ASSERT_TRUE(answers->WaitFor(4));
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(answers->status[i].ok()) << i << ": " << answers->status[i].ToString();
    EXPECT_EQ(answers->remaining[i], 9) << i;
  }
  // The three later calls: one merged call, sent when the first call's reply arrived.
  EXPECT_EQ(c.stats().coalesced_calls.load(), 1u);
  EXPECT_EQ(c.stats().coalesced_groups.load(), 3u);
}

// Held calls that make a whole merged call (max_groups) leave at once: waiting longer
// would not merge them further.
TEST(GroupCommit, AWholeMergedCallsWorthLeavesWithoutWaitingForTheReply) {
  OneConnection c(/*max_groups=*/2);
  ASSERT_NE(c.server(), nullptr);
  redis::NodeClient& n = c.node();
  auto answers = std::make_shared<Answers>(3);
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  PausedScripts paused(*c.server());
  ASSERT_TRUE(paused.ok());
  n.Send(c.Call("sluice:{first}:fw"), far, Record(answers, 0));
  std::vector<std::function<void()>> steps;
  for (std::size_t i = 1; i <= 2; ++i) {
    steps.push_back([&c, &n, answers, far, i] {
      n.Send(c.Call("sluice:{later" + std::to_string(i) + "}:fw"), far, Record(answers, i));
    });
  }
  ASSERT_TRUE(RunInTurns(n, std::move(steps)));
  // Sent as one call while the first is still in flight (the server holds it).
  EXPECT_EQ(c.stats().coalesced_calls.load(), 1u);
  EXPECT_EQ(c.stats().coalesced_groups.load(), 2u);
  EXPECT_EQ(answers->Answered(), 0u);
  paused.Resume();
  ASSERT_TRUE(answers->WaitFor(3));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(answers->status[i].ok()) << i << ": " << answers->status[i].ToString();
    EXPECT_EQ(answers->remaining[i], 9) << i;
  }
  EXPECT_EQ(c.stats().coalesced_calls.load(), 1u);
}

// A call with nothing in flight is not held: it leaves at once, as its own call.
TEST(GroupCommit, ALoneCallIsNotHeld) {
  OneConnection c;
  ASSERT_NE(c.server(), nullptr);
  auto answers = std::make_shared<Answers>(1);
  c.node().Send(c.Call("sluice:{lone}:fw"), redis::DeadlineAfter(60'000'000), Record(answers, 0));
  ASSERT_TRUE(answers->WaitFor(1));
  EXPECT_TRUE(answers->status[0].ok()) << answers->status[0].ToString();
  EXPECT_EQ(answers->remaining[0], 9);
  EXPECT_EQ(c.stats().coalesced_calls.load(), 0u);
  EXPECT_EQ(c.stats().timeouts.load(), 0u);
}

// A held call whose deadline passes gets DeadlineExceeded and is never sent; the call it
// waited for still succeeds.
TEST(GroupCommit, AHeldCallWhoseDeadlinePassesIsNeverSent) {
  OneConnection c;
  ASSERT_NE(c.server(), nullptr);
  redis::NodeClient& n = c.node();
  auto answers = std::make_shared<Answers>(3);
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  PausedScripts paused(*c.server());
  ASSERT_TRUE(paused.ok());
  n.Send(c.Call("sluice:{first}:fw"), far, Record(answers, 0));
  ASSERT_TRUE(RunInTurns(n, {[&c, &n, answers] {
                           n.Send(c.Call("sluice:{held}:fw"), redis::DeadlineAfter(kTurn),
                                  Record(answers, 1));
                         }}));
  ASSERT_TRUE(answers->WaitFor(1));  // the held call's deadline (the first waits on the server)
  EXPECT_EQ(answers->status[1].code(), ErrorCode::kDeadlineExceeded)
      << answers->status[1].ToString();
  paused.Resume();
  ASSERT_TRUE(answers->WaitFor(2));
  EXPECT_TRUE(answers->status[0].ok()) << answers->status[0].ToString();
  // One more call behind them on the same connection: had the held call been sent, it
  // would have run before this one.
  n.Send(c.Call("sluice:{after}:fw"), far, Record(answers, 2));
  ASSERT_TRUE(answers->WaitFor(3));
  EXPECT_TRUE(answers->status[2].ok()) << answers->status[2].ToString();
  EXPECT_FALSE(c.Exists("sluice:{held}:fw"));
}

// A lost connection fails held calls with kUnavailable, as it fails the calls in flight.
TEST(GroupCommit, HeldCallsFailWhenTheConnectionIsLost) {
  OneConnection c;
  ASSERT_NE(c.server(), nullptr);
  redis::NodeClient& n = c.node();
  auto answers = std::make_shared<Answers>(2);
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  PausedScripts paused(*c.server());
  ASSERT_TRUE(paused.ok());
  n.Send(c.Call("sluice:{first}:fw"), far, Record(answers, 0));
  ASSERT_TRUE(RunInTurns(n, {[&c, &n, answers, far] {
                           n.Send(c.Call("sluice:{held}:fw"), far, Record(answers, 1));
                         }}));
  ASSERT_TRUE(c.server()->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
  ASSERT_TRUE(answers->WaitFor(2));
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(answers->status[i].code(), ErrorCode::kUnavailable)
        << i << ": " << answers->status[i].ToString();
  }
}

}  // namespace
}  // namespace sluice::testing
