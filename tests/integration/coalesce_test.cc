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
#include <mutex>
#include <random>

#include "burst.h"
#include "fixed_window_layouts.h"
#include "redis/node_client.h"
#include "redis/script_wire.h"
#include "redis/scripts.h"
#include "redis/url.h"
#include "reference_store.h"
#include "sluice/key.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

// The lean script lane a batch of `checks` runs in (caller-time mode), as the store
// decides it (redis/script_wire.h).
redis::LeanLane LaneOf(std::span<const StoreCheck> checks) {
  redis::WireKind kinds[kMaxBatchChecks];
  redis::WireKinds(checks, StoreOp::kDecide, kinds);
  return redis::LeanLaneOf(checks, {kinds, checks.size()}, /*caller_time=*/true);
}

bool LeanFixedWindowOnly(std::span<const StoreCheck> checks) {
  return LaneOf(checks) == redis::LeanLane::kFixedWindow;
}

Policy RandomPolicy(std::mt19937_64& rng, int index) {
  static const Micros kWindows[] = {1'000, 250'000, 1'000'000, 3'300'000, 60'000'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 100};
  Policy p;
  p.name = "p" + std::to_string(index);
  p.algorithm = static_cast<Algorithm>(rng() % 5);
  p.limit = kLimits[rng() % std::size(kLimits)];
  p.window = kWindows[rng() % std::size(kWindows)];
  if (p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) {
    if (rng() % 2) p.burst = p.limit + rng() % (2 * p.limit + 1);
    if (p.algorithm == Algorithm::kTokenBucket && rng() % 3 == 0) {
      p.initial_tokens = rng() % (p.Capacity() + 1);
    }
  }
  EXPECT_TRUE(ValidatePolicy(p).ok());
  return p;
}

// Differential: random bursts of independent batches (random policies of every
// algorithm, keys shared between batches of one burst, peeks, costs up to the
// capacity, time moving forward between and within bursts) decided by coalesced calls
// against MemoryStore (src/core) deciding the same batches one after the other in the
// order they were sent (queued, lane after lane: calls of plain fixed-window checks only
// share the lean fixed-window script's calls, the others the coalesced script's).
TEST(CoalesceDifferential, RandomInterleavingsOfIndependentBatches) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  int compared = 0, denied = 0;
  std::uint64_t expected_calls = 0, expected_groups = 0, lean_groups = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    MemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 8; ++i) policies.push_back(RandomPolicy(rng, i));
    const char* callers[] = {"alice", "bob", "carol", "dave"};
    std::vector<std::string> keys;  // stable storage for the checks' keys
    for (const char* c : callers) {
      for (const Policy& p : policies) {
        keys.push_back(*StoreKey("co" + std::to_string(seed), c, p.name));
      }
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int burst = 0; burst < 60; ++burst) {
      const Policy& tp = policies[rng() % policies.size()];
      now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
      // Half the bursts large enough to be merged (kMinCoalescedBatches = 8 in
      // redis_store.cc), half not.
      const std::size_t ngroups = rng() % 2 ? 8 + rng() % 9 : 1 + rng() % 7;
      std::vector<Group> groups(ngroups);
      for (Group& g : groups) {
        const std::size_t n = 1 + rng() % 3;
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t pi = rng() % policies.size();
          const std::string& key = keys[(rng() % std::size(callers)) * policies.size() + pi];
          bool dup = false;
          for (const StoreCheck& c : g.checks) dup = dup || c.key == key;
          if (dup) continue;  // the Limiter never sends one key twice in a batch
          g.checks.push_back(StoreCheck{
              .policy = &policies[pi], .key = key, .cost = RandomCost(rng, policies[pi])});
        }
      }
      // The connection sends calls queued together lane after lane (connection.cc,
      // Emit), each lane in the order it was queued, lanes in the order of their first
      // group: groups of plain fixed-window checks only share the lean fixed-window
      // script's calls, of plain sliding-log checks only the lean sliding-log script's,
      // the others the coalesced script's. Time moves forward in that order.
      std::vector<redis::LeanLane> lanes;  // in the order of their first group
      for (const Group& g : groups) {
        if (std::find(lanes.begin(), lanes.end(), LaneOf(g.checks)) == lanes.end())
          lanes.push_back(LaneOf(g.checks));
      }
      std::vector<std::size_t> order;
      for (const redis::LeanLane lane : lanes) {
        for (std::size_t gi = 0; gi < ngroups; ++gi) {
          if (LaneOf(groups[gi].checks) == lane) order.push_back(gi);
        }
      }
      for (const std::size_t gi : order) {
        if (rng() % 3 == 0) now += static_cast<Micros>(rng() % 2000);
        groups[gi].now = now;
      }
      // The lean scripts' lanes are merged from 2 groups on, the coalesced script's from
      // 8 (redis_store.cc).
      std::size_t lean = 0, calls = 0, merged = 0;
      for (const redis::LeanLane lane : lanes) {
        std::size_t size = 0;
        for (const Group& g : groups) size += LaneOf(g.checks) == lane ? 1 : 0;
        if (lane != redis::LeanLane::kNone) lean += size;
        if (size >= (lane == redis::LeanLane::kNone ? 8u : 2u)) {
          ++calls;
          merged += size;
        }
      }
      lean_groups += lean;
      const auto before = redis->Stats();
      const std::vector<Outcome> got = Burst(*redis, trigger, groups, now);
      const auto after = redis->Stats();
      expected_calls += calls;
      expected_groups += merged;
      ASSERT_EQ(after.coalesced_calls - before.coalesced_calls, calls)
          << "seed " << seed << " burst " << burst;
      ASSERT_EQ(after.coalesced_evaluations - before.coalesced_evaluations, merged);
      ExpectBurstAsModel(memory, groups, got, order,
                         "seed " + std::to_string(seed) + " burst " + std::to_string(burst), denied,
                         compared);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const auto s = redis->Stats();
  EXPECT_EQ(s.coalesced_calls, expected_calls);
  EXPECT_EQ(s.coalesced_evaluations, expected_groups);
  EXPECT_GT(expected_calls, 80u);  // about half the bursts were merged
  EXPECT_GT(lean_groups, 0u);      // some in the lean scripts' calls
  EXPECT_GT(denied, 50);           // and the denials were compared too
  EXPECT_GT(compared, 4 * 60 * 3);
  ExpectEveryKeyHasATtl(*SharedRedis());
}

// Differential, the lean fixed-window script (lua/lean_fixed_window.lua): random bursts
// of batches of plain fixed-window checks only (few to many keys, peeks, costs up to the
// limit, denials, multi-check batches, time moving forward, and for one-check batches
// now and then back), some
// keys rewritten between
// bursts in the layout before issue #18 (a rolling upgrade: the script decides those
// with fixed_window.lua's body), decided in ONE call of that script per burst (two or
// more batches; a burst of one: that script's for two or more checks, the one-check
// script's for one), against the reference model deciding the same batches one after
// the other.
TEST(CoalesceDifferential, FixedWindowBurstsRunTheLeanScript) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  RecordEveryCommand(*server);
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  static const Micros kWindows[] = {250'000, 1'000'000, 3'300'000, 60'000'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 100};
  int compared = 0, denied = 0, downgraded = 0;
  std::uint64_t expected_calls = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::mt19937_64 rng(seed);
    // (MemoryStore never lets its own time go back: the plain reference model of the
    // algorithms takes every `now` as given, as Redis's states do)
    ReferenceStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 4; ++i) {
      policies.push_back(
          Policy::FixedWindow("f" + std::to_string(i), kLimits[rng() % std::size(kLimits)],
                              std::chrono::microseconds(kWindows[rng() % std::size(kWindows)])));
    }
    // Few keys (mostly live windows) to many (mostly fresh ones).
    const int callers = seed == 1 ? 3 : seed == 2 ? 15 : 75;
    std::vector<std::string> keys;
    for (int c = 0; c < callers; ++c) {
      for (const Policy& p : policies)
        keys.push_back(*StoreKey("lf" + std::to_string(seed), "c" + std::to_string(c), p.name));
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int burst = 0; burst < 50; ++burst) {
      const Policy& tp = policies[rng() % policies.size()];
      now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
      // Seed 3: now and then the clock goes back (a later window's count is kept), and
      // every batch has one check. (A batch denied by another check leaves a fresh
      // window's counter at 0, docs/redis.md "The native module": read later from an
      // earlier window, its reset_after is that later window's, where the model, which
      // wrote nothing, answers with the earlier window's.)
      const bool singles = seed == 3;
      if (singles && rng() % 6 == 0) now -= static_cast<Micros>(rng() % (2 * tp.window));
      for (std::size_t i = 0; i < keys.size(); ++i) {
        const Policy& p = policies[i % policies.size()];
        if (rng() % 4 == 0)
          downgraded += DowngradeFixedWindow(*server, keys[i], now - now % p.window, p.window);
      }
      const std::size_t ngroups = rng() % 2 ? 8 + rng() % 9 : 1 + rng() % 7;
      std::vector<Group> groups(ngroups);
      for (Group& g : groups) {
        if (rng() % 3 == 0) now += static_cast<Micros>(rng() % 2000);
        g.now = now;
        const std::size_t n = singles ? 1 : 1 + rng() % 3;
        AddRandomChecks(rng, g, n, keys, policies);
        ASSERT_TRUE(LeanFixedWindowOnly(g.checks));
      }
      const auto before = redis->Stats();
      const std::vector<Outcome> got = Burst(*redis, trigger, groups, now);
      const auto after = redis->Stats();
      const bool merged = ngroups >= 2;  // (the lean script's lane: from 2 on)
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
  EXPECT_GT(downgraded, 50);        // and keys in the previous layout were decided
  EXPECT_GT(compared, 3 * 50 * 3);
  // The calls were the lean fixed-window script's, or for one check the one-check
  // script's (SLOWLOG keeps each command's arguments: EVALSHA <sha> ...), never the
  // coalesced or the batch script's.
  std::map<std::string, int> calls = ScriptCalls(*server);
  int lean = 0, single = 0, other = 0;
  for (const auto& [sha, n] : calls) {
    if (sha == redis::LeanFixedWindowScript().sha) {
      lean += n;
    } else if (sha == redis::SingleCheckScript(Algorithm::kFixedWindow).sha) {
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
// from two on (kMinLeanFixedWindowBatches): the lean fixed-window script has no fixed
// cost to outweigh.
TEST(Coalesce, FewBatchesAreSentAsTheyAre) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  const Policy p = Policy::Gcra("g", 5, std::chrono::hours(1), 5);
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
  for (const Outcome& o : got) {
    ASSERT_TRUE(o.status.ok()) << o.status.ToString();
    EXPECT_EQ(o.decisions[0].remaining, 4u);
  }
  EXPECT_EQ(redis->Stats().coalesced_calls, 1u);        // the two fixed windows'
  EXPECT_EQ(redis->Stats().coalesced_evaluations, 2u);  // (the seven GCRA calls: one each)
}

TEST(Coalesce, BadOptionIsRefused) {
  RedisStoreOptions o;
  o.coalesce = 0;
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("coalesce"), std::string::npos) << s.status().message();
}

// The connection level, where each caller's deadline is explicit: a caller whose
// deadline passes while its call waits in the queue gets DeadlineExceeded and is not
// sent at all; the callers queued with it still share one call and succeed.
TEST(CoalesceConnection, ACallerWhoseDeadlinePassedInTheQueueTimesOutAlone) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  auto url = redis::ParseUrl(server->Url());
  ASSERT_TRUE(url.ok());
  redis::NodeOptions no;
  no.connect.handshake.url = *url;
  no.connect.handshake.scripts = redis::AllScripts();
  no.connections = 1;
  auto stats = std::make_shared<redis::ConnectionStats>();
  auto node = redis::NodeClient::Create(no, stats);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  const redis::Script& single = redis::SingleCheckScript(Algorithm::kFixedWindow);
  // The store's own encoders (redis/script_wire.h): one-check fixed-window calls (limit
  // 10 per hour, cost 1) on Redis's clock, mergeable into the coalesced script.
  const redis::CoalesceTarget target{
      redis::CoalescedScript().sha,
      redis::CoalescedScript().source,
      8,
      2,
      [](const std::vector<const redis::CoalesceInfo*>& groups, std::string& out) {
        return redis::EncodeCoalesced(/*caller_time=*/false, groups, out);
      },
      redis::DecisionSize};
  const Policy policy = Policy::FixedWindow("fw", 10, std::chrono::hours(1));
  // A one-check fixed-window call on `key`, mergeable.
  auto command = [&](const std::string& key) {
    const StoreCheck check{.policy = &policy, .key = key, .cost = 1};
    redis::CoalesceInfo info;
    std::string wire = redis::EncodeSingle(single, check, 0, /*caller_time=*/false, info);
    info.target = &target;
    return redis::Command{std::move(wire), single.source, std::move(info)};
  };
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    Status status[3];
    long long remaining[3] = {-1, -1, -1};
    int answered = 0;
  };
  auto shared = std::make_shared<Shared>();
  auto answer = [shared](int i) {
    return [shared, i](const Status& s, const redisReply* r) {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->status[i] = s;
      const std::uint64_t capacity = 10;
      Decision d;
      if (s.ok() && r->type == REDIS_REPLY_ARRAY &&
          redis::DecodeDecisions(*r, 1, &capacity, &d).ok()) {
        shared->remaining[i] = static_cast<long long>(d.remaining);
      }
      ++shared->answered;
      shared->cv.notify_all();
    };
  };
  redis::NodeClient& n = **node;
  const redis::Deadline far = redis::DeadlineAfter(60'000'000);
  n.Send(redis::Command{redis::EncodeCommand({"PING"}), {}}, far,
         [&, answer](const Status& s, const redisReply*) {
           EXPECT_TRUE(s.ok());
           // On the I/O thread: all three are queued before it takes its queue.
           n.Send(command("sluice:{a}:fw"), far, answer(0));
           n.Send(command("sluice:{late}:fw"), redis::SteadyClock::now() - std::chrono::seconds(1),
                  answer(1));
           n.Send(command("sluice:{c}:fw"), far, answer(2));
         });
  {
    std::unique_lock<std::mutex> lock(shared->mu);
    ASSERT_TRUE(
        shared->cv.wait_for(lock, std::chrono::seconds(60), [&] { return shared->answered == 3; }));
  }
  EXPECT_TRUE(shared->status[0].ok()) << shared->status[0].ToString();
  EXPECT_EQ(shared->remaining[0], 9);
  EXPECT_EQ(shared->status[1].code(), ErrorCode::kDeadlineExceeded) << shared->status[1].ToString();
  EXPECT_TRUE(shared->status[2].ok()) << shared->status[2].ToString();
  EXPECT_EQ(shared->remaining[2], 9);
  EXPECT_EQ(stats->coalesced_calls.load(), 1u);
  EXPECT_EQ(stats->coalesced_groups.load(), 2u);
  // The late caller's call never ran.
  auto late = server->Command({"EXISTS", "sluice:{late}:fw"});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->integer, 0);
  auto ttl = server->Command({"PTTL", "sluice:{a}:fw"});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 0);
}

}  // namespace
}  // namespace sluice::testing
