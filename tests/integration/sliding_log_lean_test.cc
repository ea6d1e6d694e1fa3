// The lean sliding-log script (lua/lean_sliding_log.lua, issue #18): calls of plain
// sliding-log checks, one check, a batch, or several callers' batches coalesced into one
// call, decided on the sliding log's state layout without the group runner. Held to the
// reference model on random sequences, on keys that move between it and the group
// runner's scripts (a batch with another algorithm's check runs the batch script, or the
// coalesced one when merged) and between the member layouts (logs rewritten in the
// layout before the running sums, as an earlier version left them), with every key
// TTL'd; and on Redis's clock, all or nothing, denials consuming nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "burst.h"
#include "redis/script_wire.h"
#include "redis/scripts.h"
#include "reference_store.h"
#include "sluice/key.h"

namespace sluice::testing {
namespace {

// Rewrites the log at `key` (its state and its ":log" ZSET) in the member layout before
// the running sums ("<count>:<cost>", the state's <seq> the count), with the same
// scores and TTLs: what a server of an earlier version would have left. Returns whether
// there was a log to rewrite.
bool DowngradeLog(const RedisServer& server, const std::string& key) {
  static const char* kScript =
      "local raw = redis.call('GET', KEYS[1]) if not raw then return 0 end "
      "local f, e, l, u = string.match(raw, '^(%d) (%S+) (%S+) (%S+) %S+$') "
      "if f ~= '1' then return 0 end "
      "local m = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES') "
      "local ttl, kttl = redis.call('PTTL', KEYS[2]), redis.call('PTTL', KEYS[1]) "
      "if #m == 0 or ttl <= 0 or kttl <= 0 then return 0 end "
      "redis.call('DEL', KEYS[2]) local n = 0 "
      "for i = 1, #m, 2 do n = n + 1 "
      "redis.call('ZADD', KEYS[2], m[i + 1], n .. ':' .. string.match(m[i], ':(%d+)$')) end "
      "redis.call('PEXPIRE', KEYS[2], ttl) "
      "redis.call('SET', KEYS[1], table.concat({f, e, l, u, n}, ' '), 'PX', kttl) return 1";
  auto r = server.Command({"EVAL", kScript, "2", key, key + ":log"});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return false;
  EXPECT_FALSE(r->is_error()) << r->str;
  return r->integer == 1;
}

// Whether a sliding log's state is the inline form (lua/sliding_window_log.lua: one
// byte 1, expires, last_seen and used as doubles, then cost and time per entry).
bool Inline(const std::string& state) {
  return state.size() >= 25 && (state.size() - 25) % 16 == 0 && state[0] == 1;
}

// The entries of the log at `key`: of its state (the inline form), or of its sorted set.
long long Entries(const RedisServer& server, const std::string& key) {
  auto state = server.Command({"GET", key});
  EXPECT_TRUE(state.ok());
  if (!state.ok()) return -1;
  if (Inline(state->str)) return static_cast<long long>(state->str.size() - 25) / 16;
  auto card = server.Command({"ZCARD", key + ":log"});
  EXPECT_TRUE(card.ok());
  return card.ok() ? card->integer : -1;
}

// Differential: random bursts of batches of sliding-log checks (few to many keys,
// peeks, costs up to the limit, denials, batches of up to three keys, time moving
// forward, and now and then back), each burst decided in ONE call of the lean script
// (two or more batches; one batch: its own call of it), or, one burst in four, with a
// fixed-window check added to every batch (the batch script's calls, merged into the
// coalesced script's from 8 on): one keyspace moving between the scripts; between
// bursts some logs are rewritten in the older member layout. Against the reference
// model deciding the same batches one after the other.
TEST(LeanSlidingLog, RandomBurstsAsTheModelAcrossScriptsAndLayouts) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  RecordEveryCommand(*server);
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  const Policy mix = Policy::FixedWindow("mix", 1000, std::chrono::hours(1));
  static const Micros kWindows[] = {1'000, 250'000, 1'000'000, 3'300'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 100};
  int compared = 0, denied = 0, downgraded = 0, mixed = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::mt19937_64 rng(seed);
    ReferenceStore model;
    std::vector<Policy> policies;
    for (int i = 0; i < 4; ++i) {
      // (one draw per statement: the order of a call's arguments is the compiler's, and
      // the sanitizer builds' clang and the release build's g++ differ)
      std::uint64_t limit = kLimits[rng() % std::size(kLimits)];
      Micros window = kWindows[rng() % std::size(kWindows)];
      // the first two: logs long enough for the sorted set (more than 8 entries) in every
      // seed
      if (i < 2) limit = 100, window = i == 0 ? 3'300'000 : 1'000'000;
      policies.push_back(Policy::SlidingWindowLog("l" + std::to_string(i), limit,
                                                  std::chrono::microseconds(window)));
    }
    const int callers = seed == 1 ? 3 : seed == 2 ? 15 : 75;
    std::vector<std::string> keys, mix_keys;
    for (int c = 0; c < callers; ++c) {
      const std::string caller = "c" + std::to_string(c);
      for (const Policy& p : policies)
        keys.push_back(*StoreKey("ll" + std::to_string(seed), caller, p.name));
      mix_keys.push_back(*StoreKey("ll" + std::to_string(seed), caller, mix.name));
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int burst = 0; burst < 60; ++burst) {
      const Policy& tp = policies[rng() % policies.size()];
      now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
      const bool runner = rng() % 4 == 0;
      // (not with the fixed window's checks: a denied batch leaves its counter's key,
      // read from an earlier window later; coalesce_test.cc)
      if (!runner && rng() % 6 == 0) now -= static_cast<Micros>(rng() % tp.window);
      for (const std::string& key : keys) {
        if (rng() % 5 == 0) downgraded += DowngradeLog(*server, key) ? 1 : 0;
      }
      const std::size_t ngroups = rng() % 2 ? 8 + rng() % 9 : 1 + rng() % 7;
      std::vector<Group> groups(ngroups);
      for (Group& g : groups) {
        if (rng() % 3 == 0) now += static_cast<Micros>(rng() % 2000);
        g.now = now;
        const std::size_t n = 1 + rng() % 3;
        AddRandomChecks(rng, g, n, keys, policies);
        if (runner) {
          g.checks.push_back(
              StoreCheck{.policy = &mix, .key = mix_keys[rng() % mix_keys.size()], .cost = 1});
          ++mixed;
        }
        redis::WireKind kinds[kMaxBatchChecks];
        redis::WireKinds(g.checks, StoreOp::kDecide, kinds);
        ASSERT_EQ(redis::LeanLaneOf(g.checks, {kinds, g.checks.size()}, /*caller_time=*/true),
                  runner ? redis::LeanLane::kNone : redis::LeanLane::kSlidingLog);
      }
      const auto before = redis->Stats();
      const std::vector<Outcome> got = Burst(*redis, trigger, groups, now);
      const auto after = redis->Stats();
      // (the lean sliding-log script's lane merges from 2 groups on, the coalesced
      // script's from 8: redis_store.cc)
      const bool merged = ngroups >= (runner ? 8u : 2u);
      ASSERT_EQ(after.coalesced_calls - before.coalesced_calls, merged ? 1u : 0u)
          << "seed " << seed << " burst " << burst;
      ExpectBurstAsModel(model, groups, got, {},
                         "seed " + std::to_string(seed) + " burst " + std::to_string(burst), denied,
                         compared);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(denied, 50);      // the denials were compared too
  EXPECT_GT(downgraded, 50);  // and logs in the older member layout were decided
  EXPECT_GT(mixed, 100);      // and keys moved to the group runner's scripts and back
  EXPECT_GT(compared, 3 * 60 * 3);
  // The calls were the lean sliding-log script's, or the batch and coalesced scripts'
  // for the batches with a fixed-window check.
  std::map<std::string, int> calls = ScriptCalls(*server);
  EXPECT_GT(calls[std::string(redis::LeanSlidingLogScript().sha)], 100);
  EXPECT_GT(calls[std::string(redis::BatchScript().sha)], 10);
  EXPECT_GT(calls[std::string(redis::CoalescedScript().sha)], 3);
  ExpectEveryKeyHasATtl(*server);
}

// A key decided by the lean script across more than a window (entries leave it), then
// by the group runner's batch script (a batch with a fixed-window check), then by the
// lean script again: each reads what the other wrote, and both decide as the model.
TEST(LeanSlidingLog, AKeyMovesToTheBatchScriptAndBackAsTheModel) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  ReferenceStore model;
  const Policy p = Policy::SlidingWindowLog("lw", 5, std::chrono::seconds(1));
  const Policy mix = Policy::FixedWindow("lwf", 100, std::chrono::hours(1));
  const std::string key = "sluice:{lw}:log", other = "sluice:{lw}:fw";
  const StoreCheck one{.policy = &p, .key = key, .cost = 1};
  const StoreCheck mixed[] = {one, {.policy = &mix, .key = other, .cost = 1}};
  Decision want[2], got[2];
  auto expect_as_model = [&](std::span<const StoreCheck> checks, Micros now) {
    ASSERT_TRUE(model.Run({.checks = checks, .now = now}, want).ok());
    ASSERT_TRUE(redis->Run({.checks = checks, .now = now}, got).ok());
    for (std::size_t i = 0; i < checks.size(); ++i) {
      EXPECT_TRUE(SameDecision(want[i], got[i]))
          << "now " << now << " check " << i << ": remaining " << got[i].remaining << ", model "
          << want[i].remaining;
    }
  };
  for (const Micros at : {0, 0, 600'000, 600'000, 1'200'000})
    expect_as_model({&one, 1}, kNoon + at);
  expect_as_model(mixed, kNoon + 1'300'000);  // the batch script
  EXPECT_EQ(Entries(*server, key), 4);
  for (const Micros at : {1'400'000, 1'700'000, 1'800'000, 2'300'000})
    expect_as_model({&one, 1}, kNoon + at);
  ExpectEveryKeyHasATtl(*server);
}

// An inline log that outgrows its state (a ninth entry) moves into its sorted set, and
// decides as the model from then on, as entries leave the window and requests are
// denied: the running sums start from its oldest entry.
TEST(LeanSlidingLog, AnInlineLogMovesIntoItsSortedSetAsTheModel) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  ReferenceStore model;
  const Policy p = Policy::SlidingWindowLog("grow", 12, std::chrono::seconds(1));
  const std::string key = "sluice:{grow}:log";
  Decision want[1], got[1];
  int moved = 0, denied = 0;
  for (int i = 0; i <= 60; ++i) {
    const StoreCheck one{.policy = &p, .key = key, .cost = i < 9 ? 1u : 1u + (i % 3)};
    const Micros now = kNoon + i * 50'000;
    ASSERT_TRUE(model.Run({.checks = {&one, 1}, .now = now}, want).ok());
    ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = now}, got).ok());
    EXPECT_TRUE(SameDecision(want[0], got[0]))
        << "step " << i << ": allowed " << got[0].allowed << " remaining " << got[0].remaining
        << " retry " << got[0].retry_after << ", model " << want[0].allowed << " "
        << want[0].remaining << " " << want[0].retry_after;
    denied += !got[0].allowed;
    auto state = server->Command({"GET", key});
    ASSERT_TRUE(state.ok());
    moved += state->str.starts_with("1 ");
  }
  EXPECT_GT(moved, 30);
  EXPECT_GT(denied, 10);
  ExpectEveryKeyHasATtl(*server);
}

// On Redis's clock (production mode): a log fills up to its limit, a denial consumes
// nothing and says when room comes back; a batch of two keys that one of them denies
// logs nothing on either; leftovers of a log without its state are not read as the
// key's; every key has a TTL.
TEST(LeanSlidingLog, OnRedisClockAllOrNothingAndDenialsConsumeNothing) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  const Policy p = Policy::SlidingWindowLog("rc", 3, std::chrono::hours(1));
  const Policy big = Policy::SlidingWindowLog("rc-big", 30, std::chrono::hours(1));
  const std::string a = "sluice:{rc}:a", b = "sluice:{rc}:b";
  for (const Policy* policy : {&p, &big}) {  // (an inline log; a sorted set from 9 entries)
    SCOPED_TRACE(policy->name);
    ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
    const std::uint64_t limit = policy->limit;
    const StoreCheck one{.policy = policy, .key = a, .cost = 1};
    Decision d[2];
    for (std::uint64_t used = 1; used <= limit; ++used) {
      ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = 0}, d).ok());
      EXPECT_TRUE(d[0].allowed);
      EXPECT_EQ(d[0].remaining, limit - used);
      EXPECT_EQ(d[0].reset_after, policy->window);
    }
    ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = 0}, d).ok());
    EXPECT_FALSE(d[0].allowed);
    EXPECT_EQ(d[0].remaining, 0u);
    EXPECT_GT(d[0].retry_after, 0);
    EXPECT_LE(d[0].retry_after, policy->window);
    const long long entries_a = Entries(*server, a);
    EXPECT_EQ(entries_a, static_cast<long long>(limit));
    // b allows, a denies: the batch logs nothing
    const StoreCheck both[] = {{.policy = policy, .key = b, .cost = 2}, one};
    ASSERT_TRUE(redis->Run({.checks = both, .now = 0}, d).ok());
    EXPECT_TRUE(d[0].allowed);
    EXPECT_FALSE(d[1].allowed);
    auto absent = server->Command({"EXISTS", b, b + ":log"});
    ASSERT_TRUE(absent.ok());
    EXPECT_EQ(absent->integer, 0);
    EXPECT_EQ(Entries(*server, a), entries_a);
    ExpectEveryKeyHasATtl(*server);
  }
  // A log whose state key is gone (evicted, deleted) is not read as the key's: the
  // decisions start a fresh log, and a sorted set it moves into holds its own entries.
  const std::string c = "sluice:{rc}:c";
  for (const Policy* policy : {&p, &big}) {
    SCOPED_TRACE(policy->name);
    ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
    ASSERT_TRUE(server->Command({"ZADD", c + ":log", "1", "1:3", "2", "2:3"}).ok());
    ASSERT_TRUE(server->Command({"PEXPIRE", c + ":log", "3600000"}).ok());
    const StoreCheck on_c{.policy = policy, .key = c, .cost = 1};
    Decision d[1];
    for (std::uint64_t used = 1; used <= policy->limit; ++used) {
      ASSERT_TRUE(redis->Run({.checks = {&on_c, 1}, .now = 0}, d).ok());
      EXPECT_TRUE(d[0].allowed);
      EXPECT_EQ(d[0].remaining, policy->limit - used);
    }
    auto leftover = server->Command({"ZSCORE", c + ":log", "1:3"});
    ASSERT_TRUE(leftover.ok());
    if (policy == &big) {
      EXPECT_TRUE(leftover->str.empty()) << leftover->str;
      EXPECT_EQ(server->Command({"ZCARD", c + ":log"})->integer, 30);
    }
    ExpectEveryKeyHasATtl(*server);
  }
}

// A log of up to 8 entries is its state key alone (the inline form): a fresh
// log costs Redis ONE command, a `SET ... NX GET`, and each entry more two `SET`s,
// with no sorted set. It decides as a log: a limit of one denies the next request until
// the entry leaves the window, and says so; a ninth entry moves them all into the
// sorted set (the text state "1 ..."). The group runner's batch script (a batch with
// another algorithm's check) keeps the same form: inline up to 8 entries, with no sorted
// set command, then the sorted set.
TEST(LeanSlidingLog, AShortLogIsItsStateAlone) {
  auto redis = CoalescingStore(/*caller_time=*/false);
  ASSERT_NE(redis, nullptr);
  RedisServer* server = SharedRedis();
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  const Policy p = Policy::SlidingWindowLog("short", 20, std::chrono::hours(1));
  const Policy single = Policy::SlidingWindowLog("single", 1, std::chrono::hours(1));
  const Policy fw = Policy::FixedWindow("fw", 100, std::chrono::hours(1));
  const std::string a = "sluice:{short}:a", b = "sluice:{short}:b", x = "sluice:{short}:x";
  auto state = [&](const std::string& key) {
    auto r = server->Command({"GET", key});
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->str : std::string();
  };
  auto exists = [&](const std::string& key) {
    auto r = server->Command({"EXISTS", key});
    EXPECT_TRUE(r.ok());
    return r.ok() && r->integer == 1;
  };
  const char* kCommands[] = {"set", "get", "zadd", "del", "pexpire", "zremrangebyscore"};
  auto counts = [&] {
    std::vector<long long> c;
    for (const char* name : kCommands) c.push_back(server->CommandCalls(name));
    return c;
  };
  Decision d[2];
  const StoreCheck on_a{.policy = &p, .key = a, .cost = 1};
  for (std::uint64_t used = 1; used <= 8; ++used) {
    const std::vector<long long> before = counts();
    ASSERT_TRUE(redis->Run({.checks = {&on_a, 1}, .now = 0}, d).ok());
    EXPECT_TRUE(d[0].allowed);
    EXPECT_EQ(d[0].remaining, 20 - used);
    const std::vector<long long> after = counts();
    // the first: SET ... NX GET, written; the next ones: that SET refused, its reply the
    // log's state (no GET), then the SET of the log with its new entry
    const long long expected[][2] = {{1, 0}, {2, 0}};
    const long long* e = expected[used == 1 ? 0 : 1];
    for (std::size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(after[i] - before[i], i < 2 ? e[i] : 0) << kCommands[i] << ", entry " << used;
    }
    EXPECT_TRUE(Inline(state(a)));
    EXPECT_FALSE(exists(a + ":log"));
  }
  // the ninth entry: all nine in the sorted set
  ASSERT_TRUE(redis->Run({.checks = {&on_a, 1}, .now = 0}, d).ok());
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 11u);
  EXPECT_TRUE(state(a).starts_with("1 ")) << state(a);
  auto card = server->Command({"ZCARD", a + ":log"});
  ASSERT_TRUE(card.ok());
  EXPECT_EQ(card->integer, 9);
  ASSERT_TRUE(redis->Run({.checks = {&on_a, 1}, .now = 0}, d).ok());
  EXPECT_EQ(d[0].remaining, 10u);

  // A limit of one: the entry denies until it leaves the window, and the denial keeps
  // the inline form.
  const StoreCheck on_b{.policy = &single, .key = b, .cost = 1};
  ASSERT_TRUE(redis->Run({.checks = {&on_b, 1}, .now = 0}, d).ok());
  EXPECT_TRUE(d[0].allowed);
  ASSERT_TRUE(redis->Run({.checks = {&on_b, 1}, .now = 0}, d).ok());
  EXPECT_FALSE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 0u);
  EXPECT_GT(d[0].retry_after, 0);
  EXPECT_LE(d[0].retry_after, single.window);
  EXPECT_EQ(d[0].retry_after, d[0].reset_after);
  EXPECT_TRUE(Inline(state(b)));
  EXPECT_FALSE(exists(b + ":log"));

  // The batch script (a batch with a fixed-window check) reads an inline log as a log
  // of its entries, and adds to it in the same form until it outgrows it.
  ASSERT_TRUE(server->Command({"DEL", a, a + ":log"}).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(redis->Run({.checks = {&on_a, 1}, .now = 0}, d).ok());
  EXPECT_TRUE(Inline(state(a)));
  const StoreCheck batch[] = {on_a, {.policy = &fw, .key = x, .cost = 1}};
  for (std::uint64_t used = 4; used <= 8; ++used) {
    const std::vector<long long> before = counts();
    ASSERT_TRUE(redis->Run({.checks = batch, .now = 0}, d).ok());
    EXPECT_TRUE(d[0].allowed);
    EXPECT_EQ(d[0].remaining, 20 - used);
    const std::vector<long long> after = counts();
    for (std::size_t i = 2; i < before.size(); ++i) {
      EXPECT_EQ(after[i] - before[i], 0) << kCommands[i] << ", entry " << used;
    }
    EXPECT_TRUE(Inline(state(a))) << "entry " << used;
    EXPECT_FALSE(exists(a + ":log"));
  }
  // the ninth: DEL of leftovers, ONE ZADD of every entry, ONE PEXPIRE, and the state
  const std::vector<long long> before_move = counts();
  ASSERT_TRUE(redis->Run({.checks = batch, .now = 0}, d).ok());
  const std::vector<long long> after_move = counts();
  const long long moved[] = {-1, -1, 1, 1, 1, 0};  // (set and get: the fixed window's too)
  for (std::size_t i = 2; i < before_move.size(); ++i) {
    EXPECT_EQ(after_move[i] - before_move[i], moved[i]) << kCommands[i] << ", the move";
  }
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 11u);
  EXPECT_TRUE(state(a).starts_with("1 ")) << state(a);
  card = server->Command({"ZCARD", a + ":log"});
  ASSERT_TRUE(card.ok());
  EXPECT_EQ(card->integer, 9);
  // A fresh log in a batch starts inline as well.
  const StoreCheck fresh_batch[] = {{.policy = &p, .key = "sluice:{short}:f", .cost = 2},
                                    {.policy = &fw, .key = x, .cost = 1}};
  ASSERT_TRUE(redis->Run({.checks = fresh_batch, .now = 0}, d).ok());
  EXPECT_EQ(d[0].remaining, 18u);
  EXPECT_TRUE(Inline(state("sluice:{short}:f")));
  EXPECT_FALSE(exists("sluice:{short}:f:log"));
  ExpectEveryKeyHasATtl(*server);
}

// The inline form at the window's edge (caller time): the entry counts up to the
// last microsecond before it is a window old, and not from then on, as in the model;
// a denial on it waits exactly that long.
TEST(LeanSlidingLog, AnInlineLogLeavesTheWindowOnTime) {
  auto redis = CoalescingStore(/*caller_time=*/true);
  ASSERT_NE(redis, nullptr);
  const Policy p = Policy::SlidingWindowLog("edge", 1, std::chrono::seconds(10));
  const std::string key = "sluice:{edge}:k";
  const StoreCheck one{.policy = &p, .key = key, .cost = 1};
  const Micros t0 = 1'000'000'000'000;
  Decision d[1];
  ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = t0}, d).ok());
  EXPECT_TRUE(d[0].allowed);
  ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = t0 + p.window - 1}, d).ok());
  EXPECT_FALSE(d[0].allowed);
  EXPECT_EQ(d[0].retry_after, 1);
  EXPECT_EQ(d[0].reset_after, 1);
  ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = t0 + p.window}, d).ok());
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 0u);
  EXPECT_EQ(d[0].reset_after, p.window);
}

}  // namespace
}  // namespace sluice::testing
