// Penalties and blocks on Redis's own clock (the production mode), through the
// Limiter: the block key (state key + ":b") with its TTL, the deny cache keeping a
// blocked key without store calls, Penalize / Reward / Reset, and bad input. The
// decisions themselves are held to the in-process store's by the differential test
// (differential_test.cc, BlocksPenaltiesAndRewards).
#include <gtest/gtest.h>

#include <chrono>

#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

struct RedisLimiter {
  std::shared_ptr<RedisStore> store;
  std::unique_ptr<Limiter> limiter;
};

RedisLimiter Make(RedisServer& server, std::vector<Policy> policies, bool deny_cache = true) {
  RedisStoreOptions o;
  o.url = server.Url();
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  LimiterOptions lo;
  lo.policies = std::move(policies);
  lo.store = *store;
  lo.deny_cache = deny_cache;
  auto limiter = Limiter::Create(std::move(lo));
  EXPECT_TRUE(limiter.ok()) << limiter.status().ToString();
  return {*store, std::move(*limiter)};
}

Policy Blocking(Policy p, Micros block_for) {
  p.block_for = block_for;
  return p;
}

constexpr Micros kHour = 3600 * kSec;

// The first denial writes the block key with a TTL of block_for; the deny cache then
// answers every retry without a store call; Reset deletes the block key and ends it.
TEST(RedisBlocks, BlockKeyDenyCacheAndReset) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisLimiter r =
      Make(*server, {Blocking(Policy::FixedWindow("login", 3, std::chrono::hours(1)), kHour)});
  Limiter& l = *r.limiter;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.Acquire("user:1")->allowed) << i;
  const std::string block_key = "sluice:{user%3A1}:login:b";
  EXPECT_EQ(server->Command({"EXISTS", block_key})->integer, 0);  // no block yet
  auto d = l.Acquire("user:1");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(d->retry_after, kHour - 60 * kSec);  // about the block_for (Redis's clock)
  EXPECT_LE(d->retry_after, kHour);
  auto ttl = server->Command({"PTTL", block_key});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 3'540'000) << "the block key lives as long as the block";
  EXPECT_LE(ttl->integer, 3'600'000);
  // Retries are denied locally until the block ends: no store call.
  const std::uint64_t calls = r.store->Stats().calls;
  for (int i = 0; i < 100; ++i) {
    auto again = l.Acquire("user:1");
    ASSERT_FALSE(again->allowed);
    ASSERT_EQ(again->source, DecisionSource::kDenyCache);
  }
  EXPECT_EQ(r.store->Stats().calls, calls);
  EXPECT_EQ(l.Stats().deny_cache_hits, 100u);
  // Reset deletes the state and the block key: the key passes again.
  ASSERT_TRUE(l.Reset("user:1").ok());
  EXPECT_EQ(server->Command({"EXISTS", block_key})->integer, 0);
  EXPECT_TRUE(l.Acquire("user:1")->allowed);
}

// Without the deny cache every check asks Redis, and the block holds there: a budget
// given back (Reward) does not end it.
TEST(RedisBlocks, BlockHoldsInRedisWithoutTheDenyCache) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisLimiter r =
      Make(*server, {Blocking(Policy::TokenBucket("tb", 2, 2, std::chrono::hours(1)), kHour)},
           /*deny_cache=*/false);
  Limiter& l = *r.limiter;
  EXPECT_TRUE(l.Acquire("k", 2)->allowed);
  EXPECT_FALSE(l.Acquire("k")->allowed);  // starts the block
  ASSERT_TRUE(l.Reward("k", 2).ok());     // the budget is back ...
  auto d = l.Acquire("k");
  EXPECT_FALSE(d->allowed);  // ... but the key is blocked
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(d->remaining, 0u);
  EXPECT_GT(d->retry_after, kHour - 60 * kSec);
  auto peek = l.Peek("k");
  EXPECT_FALSE(peek->allowed);
  ASSERT_TRUE(l.Reset("k").ok());
  EXPECT_TRUE(l.Acquire("k", 2)->allowed);
}

// Penalize on every algorithm: over the limit, bounded, a block started, the state's key
// keeps a TTL; Reward works the overdraft off.
TEST(RedisPenalties, EveryAlgorithmOnRedisClock) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  const auto hour = std::chrono::hours(1);
  RedisLimiter r =
      Make(*server,
           {Policy::FixedWindow("fw", 3, hour), Policy::SlidingWindowLog("log", 3, hour),
            Policy::SlidingWindowCounter("swc", 3, hour), Policy::TokenBucket("tb", 3, 3, hour),
            Policy::Gcra("gcra", 3, hour, 3)},
           /*deny_cache=*/false);
  Limiter& l = *r.limiter;
  Decision per[5];
  auto d = l.Penalize("bad", 2, per);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(per[i].allowed) << i;
    EXPECT_EQ(per[i].remaining, 1u) << i;
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(l.Penalize("bad", 3, per).ok());  // bounded at 6
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(per[i].allowed) << i;
    EXPECT_EQ(per[i].remaining, 0u) << i;
  }
  ASSERT_TRUE(l.Reward("bad", 3).ok());  // 6 -> 3: still at the limit
  EXPECT_FALSE(l.Acquire("bad")->allowed);
  ASSERT_TRUE(l.Reward("bad", 1).ok());  // 2: one unit free under every policy
  EXPECT_TRUE(l.Acquire("bad")->allowed);
  auto keys = server->Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  EXPECT_GE(keys->elements.size(), 5u);
  for (const auto& k : keys->elements) {
    EXPECT_GT(server->Command({"PTTL", k.str})->integer, 0) << k.str;
  }
}

TEST(RedisPenalties, PenaltyStartsTheBlockAndIsCached) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisLimiter r =
      Make(*server, {Blocking(Policy::Gcra("g", 5, std::chrono::minutes(1), 5), 2 * kHour)});
  Limiter& l = *r.limiter;
  auto d = l.Penalize("ip:10.0.0.9", 5);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_GT(d->retry_after, 2 * kHour - 60 * kSec);
  const std::uint64_t calls = r.store->Stats().calls;
  EXPECT_EQ(l.Acquire("ip:10.0.0.9")->source, DecisionSource::kDenyCache);
  EXPECT_EQ(r.store->Stats().calls, calls);
  EXPECT_EQ(server->Command({"EXISTS", "sluice:{ip%3A10.0.0.9}:g:b"})->integer, 1);
}

TEST(RedisPenalties, BadInput) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  RedisLimiter r = Make(*server, {Policy::FixedWindow("fw", 3, std::chrono::seconds(1))});
  EXPECT_EQ(r.limiter->Penalize("k", 0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.limiter->Penalize("k", 4).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.limiter->Reward("k", 0).code(), ErrorCode::kInvalidArgument);
  const Policy& p = r.limiter->policies()[0];
  // A penalty batch with a check out of range is refused whole, naming the policy.
  StoreCheck checks[2] = {{.policy = &p, .key = "sluice:{k}:fw", .cost = 1},
                          {.policy = &p, .key = "sluice:{k}:fw2", .cost = 0}};
  Decision out[2];
  Status s = r.store->Run({.op = StoreOp::kPenalize, .checks = checks, .now = 0}, out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("penalty cost 0 of policy 'fw' must be 1-3"), std::string::npos)
      << s.message();
  EXPECT_EQ(server->Command({"EXISTS", "sluice:{k}:fw"})->integer, 0) << "nothing was applied";
}

// A GCRA policy with on_change records its parameters in its state (the 41-byte carry
// layout, lua/gcra.lua); a penalty must add to what its own decisions used, not start
// from a fresh TAT (issue #17 bug 3, found by the differential test in the memory
// branch). 10/min, burst 10: 6 taken, a penalty of 1 leaves 3.
TEST(RedisPenalties, AGcraPenaltyKeepsTheUsageOfACarryOverState) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  Policy p = Policy::Gcra("g", 10, std::chrono::minutes(1), 10);
  p.on_change = OnChange::kProportional;
  RedisLimiter r = Make(*server, {p}, /*deny_cache=*/false);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(r.limiter->Acquire("k")->allowed) << i;
  auto state = server->Command({"STRLEN", "sluice:{k}:g"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->integer, 41) << "the carry layout, which this test is about";
  auto d = r.limiter->Penalize("k", 1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->remaining, 3u) << "6 used + 1 penalty of 10";
}

// The same on Redis (the scripts' FORCE normalises through DECIDE, lua/word_state.lua):
// after a limit change under on_change proportional, a penalty adds to the carried
// usage instead of reading the state as fresh. Every word algorithm.
TEST(RedisPenalties, AfterAProportionalLimitChangeAddsToTheCarriedUsage) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const Policy before[] = {Policy::FixedWindow("api", 10, std::chrono::minutes(1)),
                           Policy::SlidingWindowCounter("api", 10, std::chrono::minutes(1)),
                           Policy::TokenBucket("api", 10, 10, std::chrono::minutes(1)),
                           Policy::Gcra("api", 10, std::chrono::minutes(1), 10)};
  for (Policy p : before) {
    ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
    p.on_change = OnChange::kProportional;
    RedisLimiter first = Make(*server, {p}, /*deny_cache=*/false);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(first.limiter->Acquire("k")->allowed) << i;
    Policy bigger = p;
    bigger.limit = 20;
    if (bigger.burst != 0) bigger.burst = 20;
    RedisLimiter second = Make(*server, {bigger}, /*deny_cache=*/false);
    const auto peek = second.limiter->Peek("k");
    ASSERT_TRUE(peek.ok()) << peek.status().ToString();
    EXPECT_EQ(peek->remaining, 10u) << AlgorithmName(p.algorithm) << ": 5 of 10 is 10 of 20";
    const auto d = second.limiter->Penalize("k", 1);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->remaining, 9u) << AlgorithmName(p.algorithm);
    EXPECT_EQ(second.limiter->Peek("k")->remaining, 9u) << AlgorithmName(p.algorithm);
  }
}

}  // namespace
}  // namespace sluice::testing
