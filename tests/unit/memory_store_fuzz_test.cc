// Randomised tests of MemoryStore (run under ASan/UBSan by the asan preset):
//  - differential: random batches of random keys (inline, boundary-length and heap
//    keys), costs (0 = peek) and algorithms, with time moving forward, must get
//    exactly the decisions of a plain reference model built on the same pure
//    algorithms (src/core), including keys switching algorithm;
//  - invariants: with time jumping backwards and a small key cap, no crash, the key
//    cap holds, and no key ever gets more than its algorithm can allow over the span
//    of store time it has seen (the store's time is the latest `now` it was given).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/algorithms.h"
#include "reference_store.h"
#include "sluice/memory_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr Micros kStart = 1785412800LL * 1'000'000;  // a minute boundary

std::vector<Policy> FuzzPolicies() {
  std::vector<Policy> ps = {
      Policy::FixedWindow("fw", 5, seconds(1)),
      Policy::SlidingWindowLog("log", 7, seconds(1)),
      Policy::SlidingWindowCounter("swc", 6, seconds(1)),
      Policy::TokenBucket("tb", 5, 3, seconds(1)),
      Policy::Gcra("gcra", 4, seconds(1), 6),
  };
  for (const Policy& p : ps) EXPECT_TRUE(ValidatePolicy(p).ok()) << p.name;
  return ps;
}

// Keys of many lengths around the store's 30-byte inline limit, and long ones.
std::vector<std::string> FuzzKeys(std::mt19937_64& rng, int n) {
  const std::size_t lengths[] = {1, 7, 16, 29, 30, 31, 32, 45, 200};
  std::set<std::string> keys;
  while (static_cast<int>(keys.size()) < n) {
    std::string k(lengths[rng() % std::size(lengths)], 'a');
    for (char& c : k) c = static_cast<char>('a' + rng() % 3);  // many shared prefixes
    keys.insert(k);
  }
  return {keys.begin(), keys.end()};
}

void ExpectSame(const Decision& got, const Decision& want, const std::string& where) {
  EXPECT_EQ(got.allowed, want.allowed) << where;
  EXPECT_EQ(got.limit, want.limit) << where;
  EXPECT_EQ(got.remaining, want.remaining) << where;
  EXPECT_EQ(got.reset_after, want.reset_after) << where;
  EXPECT_EQ(got.retry_after, want.retry_after) << where;
}

class MemoryStoreFuzz : public ::testing::TestWithParam<int> {};

TEST_P(MemoryStoreFuzz, DecidesExactlyLikeTheReferenceModel) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()));
  const std::vector<Policy> policies = FuzzPolicies();
  const std::vector<std::string> keys = FuzzKeys(rng, 60);
  // Few shards so that tables grow, collide and shift entries on erase.
  MemoryStore store(MemoryStoreOptions{.max_keys = 1 << 20, .shards = 2});
  ReferenceStore ref;
  Micros now = kStart;
  std::vector<StoreCheck> checks;
  std::vector<Decision> got(16), want(16);
  for (int step = 0; step < 6000; ++step) {
    // Mostly small steps, sometimes none, sometimes beyond every window.
    const int r = static_cast<int>(rng() % 100);
    now += r < 30 ? 0 : r < 95 ? static_cast<Micros>(rng() % 200'000) : 3'000'000;
    checks.clear();
    std::set<std::string_view> used;
    const std::size_t n = 1 + rng() % 3;
    while (checks.size() < n) {
      const std::string& key = keys[rng() % keys.size()];
      if (!used.insert(key).second) continue;
      const Policy& p = policies[rng() % policies.size()];
      const std::uint64_t cost = rng() % 5 == 0 ? 0 : 1 + rng() % p.Capacity();
      checks.push_back(StoreCheck{.policy = &p, .key = key, .cost = cost});
    }
    ASSERT_TRUE(store.Run({.checks = checks, .now = now}, got).ok());
    ref.Run({.checks = checks, .now = now}, want);
    for (std::size_t i = 0; i < checks.size(); ++i) {
      ExpectSame(got[i], want[i],
                 "step " + std::to_string(step) + " key '" + std::string(checks[i].key) +
                     "' policy " + checks[i].policy->name + " cost " +
                     std::to_string(checks[i].cost));
    }
    if (HasFailure()) return;
  }
}

// What one key may get at most, given the times it has seen: the policy's capacity
// plus its rate over the span, with a window's slack for the window algorithms
// (the fixed window's documented 2x at a boundary included).
struct KeyBudget {
  Micros first = 0;
  Micros last = 0;
  std::uint64_t allowed = 0;
  bool seen = false;
  std::string history;  // printed when the bound is broken
};

std::uint64_t MaxAllowed(const Policy& p, const KeyBudget& b) {
  const auto span = static_cast<std::uint64_t>(b.last - b.first);
  const auto w = static_cast<std::uint64_t>(p.window);
  if (p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) {
    return p.Capacity() + p.limit * span / w + 1;
  }
  return p.limit * (span / w + 2);
}

TEST_P(MemoryStoreFuzz, TimeGoingBackAndKeyCapPressureKeepTheInvariants) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()) + 1000);
  const std::vector<Policy> policies = FuzzPolicies();
  const std::vector<std::string> keys = FuzzKeys(rng, 120);
  constexpr std::size_t kCap = 40;
  // One shard: the store's time is then the running maximum of `now`.
  MemoryStore store(MemoryStoreOptions{.max_keys = kCap, .shards = 1});
  Micros store_time = std::numeric_limits<Micros>::min();
  // Each key is bound to one policy here, so its budget is well defined.
  std::map<std::string_view, std::size_t> policy_of;
  for (const std::string& k : keys) policy_of[k] = rng() % policies.size();
  std::map<std::string_view, KeyBudget> budget;
  Micros now = kStart;
  std::vector<StoreCheck> checks;
  std::vector<Decision> got(16);
  std::uint64_t full = 0;
  for (int step = 0; step < 20000; ++step) {
    const int r = static_cast<int>(rng() % 100);
    if (r < 10) {
      now -= static_cast<Micros>(rng() % 5'000'000);  // back, up to 5 windows
    } else if (r < 90) {
      now += static_cast<Micros>(rng() % 100'000);
    } else {
      now += 2'000'000;
    }
    store_time = std::max(store_time, now);
    checks.clear();
    std::set<std::string_view> used;
    const std::size_t n = 1 + rng() % 4;
    while (checks.size() < n) {
      const std::string& key = keys[rng() % keys.size()];
      if (!used.insert(key).second) continue;
      const Policy& p = policies[policy_of[key]];
      checks.push_back(StoreCheck{
          .policy = &p, .key = key, .cost = rng() % 6 == 0 ? 0 : 1 + rng() % p.Capacity()});
    }
    const Status s = store.Run({.checks = checks, .now = now}, got);
    ASSERT_LE(store.Stats().keys, kCap);
    if (!s.ok()) {
      ASSERT_EQ(s.code(), ErrorCode::kResourceExhausted) << s.ToString();
      ++full;
      continue;  // nothing consumed
    }
    bool all = true;
    for (std::size_t i = 0; i < checks.size(); ++i) all = all && got[i].allowed;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const Decision& d = got[i];
      const Policy& p = *checks[i].policy;
      ASSERT_EQ(d.limit, p.Capacity());
      ASSERT_LE(d.remaining, p.Capacity());
      ASSERT_GE(d.retry_after, 0);
      ASSERT_GE(d.reset_after, 0);
      KeyBudget& b = budget[checks[i].key];
      if (!b.seen) b.first = store_time, b.seen = true;
      b.last = store_time;
      if (all) b.allowed += checks[i].cost;
      b.history += " t=" + std::to_string(now - kStart) +
                   " cost=" + std::to_string(checks[i].cost) + (all ? " ok" : " no") +
                   " rem=" + std::to_string(d.remaining) + ";";
      ASSERT_LE(b.allowed, MaxAllowed(p, b)) << "key '" << checks[i].key << "' policy " << p.name
                                             << " step " << step << ":" << b.history;
    }
  }
  EXPECT_GT(full, 0u) << "the key cap was never reached: the test lost its point";
}

INSTANTIATE_TEST_SUITE_P(Seeds, MemoryStoreFuzz, ::testing::Values(1, 2, 3, 4));

// Threads on a shared small store, new keys in every batch: the cap is exact.
TEST(MemoryStoreFuzzThreads, KeyCapHoldsUnderConcurrentInserts) {
  constexpr std::size_t kCap = 100;
  MemoryStore store(MemoryStoreOptions{.max_keys = kCap, .shards = 8});
  const Policy p = Policy::FixedWindow("fw", 10, seconds(3600));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, &p, t] {
      std::vector<std::string> keys(3);
      Decision out[3];
      for (int i = 0; i < 500; ++i) {
        StoreCheck checks[3];
        for (int j = 0; j < 3; ++j) {
          keys[j] = "t" + std::to_string(t) + "-" + std::to_string(i) + "-" + std::to_string(j);
          checks[j] = StoreCheck{.policy = &p, .key = keys[j], .cost = 1};
        }
        (void)store.Run({.checks = checks, .now = kStart}, out);
      }
    });
  }
  for (auto& t : threads) t.join();
  // All-or-nothing batches of 3 new keys: the last batches may not fit exactly.
  EXPECT_LE(store.Stats().keys, kCap);
  EXPECT_GE(store.Stats().keys, kCap - 2);
}

// Whether an idle key was swept must not change a decision, even for a request
// stamped earlier than the sweep. Store X sweeps key "a" (back to full at a later
// time); store Y keeps it. A request for "a" stamped before that time must get the
// same answer from both.
TEST(MemoryStoreTime, SweepingNeverChangesADecisionWhenTimeGoesBack) {
  for (const Policy& p : FuzzPolicies()) {
    MemoryStore x(MemoryStoreOptions{.shards = 1});
    MemoryStore y(MemoryStoreOptions{.shards = 1});
    auto take = [&](MemoryStore& store, std::string_view key, std::uint64_t cost, Micros t) {
      Decision d;
      StoreCheck c{.policy = &p, .key = key, .cost = cost};
      const Status s = store.Run({.checks = std::span<const StoreCheck>(&c, 1), .now = t}, {&d, 1});
      EXPECT_TRUE(s.ok()) << p.name << ": " << s.ToString();
      return d;
    };
    const Micros later = kStart + 10'000'000;  // "a" is back to full by then
    EXPECT_TRUE(take(x, "a", p.Capacity(), kStart).allowed);
    EXPECT_TRUE(take(y, "a", p.Capacity(), kStart).allowed);
    // X: new keys at `later`; each insert sweeps a few slots, so "a" is dropped.
    for (int i = 0; i < 8; ++i) take(x, "filler-" + std::to_string(i), 1, later);
    ASSERT_GE(x.Stats().expired, 1u) << p.name;
    // Y: only a peek at `later` (inserts and sweeps nothing); "a" is kept.
    take(y, "z", 0, later);
    ASSERT_EQ(y.Stats().expired, 0u);
    for (Micros t : {kStart + 1'000, kStart + 2'000}) {
      const Decision dx = take(x, "a", p.Capacity(), t);
      const Decision dy = take(y, "a", p.Capacity(), t);
      ExpectSame(dx, dy, p.name + " at +" + std::to_string(t - kStart) + "us");
    }
  }
}

}  // namespace
}  // namespace sluice::testing
