#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "test_util.h"

// Counts heap allocations made by this thread while `g_counting` is set.
namespace {
thread_local bool g_counting = false;
thread_local long g_allocs = 0;
}  // namespace
// GCC 12 flags malloc/free inside replacement operators as mismatched once they
// are inlined into callers; they are the matching pair here.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting) ++g_allocs;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace sluice::testing {
namespace {

const Algorithm kWordAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter,
                                     Algorithm::kTokenBucket, Algorithm::kGcra};

Policy Make(Algorithm a, std::uint64_t limit, Micros window) {
  Policy p;
  p.name = "p";
  p.algorithm = a;
  p.limit = limit;
  p.window = window;
  return p;
}

TEST(MemoryStore, NoAllocationPerDecisionOnExistingKey) {
  for (Algorithm a : kWordAlgorithms) {
    Harness h({Make(a, 1000, kSec)});
    h.Take("user-0000000042");  // create the key, warm thread-local buffers
    g_allocs = 0;
    g_counting = true;
    for (int i = 0; i < 100; ++i) {
      h.clock->Advance(1000);
      (void)h.limiter->Acquire("user-0000000042");
    }
    g_counting = false;
    EXPECT_EQ(g_allocs, 0) << AlgorithmName(a);
  }
}

TEST(MemoryStore, IdleKeysExpireOnceBackToFull) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto store = std::make_shared<MemoryStore>(MemoryStoreOptions{.max_keys = 1000, .shards = 1});
  LimiterOptions o;
  o.policies = {Policy::FixedWindow("p", 5, std::chrono::seconds(1))};
  o.store = store;
  o.clock = clock;
  auto limiter = std::move(Limiter::Create(std::move(o))).value();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter->Acquire("k" + std::to_string(i))->allowed);
  EXPECT_EQ(store->Stats().keys, 1000u);
  // The cap is reached and nothing has expired: a new key cannot be tracked.
  auto r = limiter->Acquire("new");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->source, DecisionSource::kFailOpen);
  EXPECT_EQ(store->Stats().rejected_full, 1u);
  // Once the window is over every key is back to full and can be swept.
  clock->Advance(kSec);
  r = limiter->Acquire("new");
  EXPECT_EQ(r->source, DecisionSource::kStore);
  EXPECT_TRUE(r->allowed);
  EXPECT_EQ(store->Stats().keys, 1u);
  EXPECT_EQ(store->Stats().expired, 1000u);
}

// An attacker floods unique keys: memory stays bounded, and a key that is being
// limited keeps its state (eviction never hands it a fresh budget).
TEST(MemoryStore, KeyCapUnderFloodNeverResetsALimitedKey) {
  for (FailureMode mode : {FailureMode::kFailOpen, FailureMode::kFailClosed}) {
    auto clock = std::make_shared<ManualClock>(kNoon);
    auto store = std::make_shared<MemoryStore>(MemoryStoreOptions{.max_keys = 500, .shards = 4});
    Policy p = Policy::SlidingWindowCounter("p", 10, std::chrono::minutes(1));
    p.failure_mode = mode;
    LimiterOptions o;
    o.policies = {p};
    o.store = store;
    o.clock = clock;
    auto limiter = std::move(Limiter::Create(std::move(o))).value();
    EXPECT_EQ(limiter->Acquire("victim-is-limited", 10)->allowed, true);
    for (int i = 0; i < 20000; ++i) {
      clock->Advance(100);
      (void)limiter->Acquire("flood-" + std::to_string(i));
      ASSERT_LE(store->Stats().keys, 500u);
    }
    auto d = limiter->Acquire("victim-is-limited");
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_GT(store->Stats().rejected_full, 0u);
    // New keys get the failure mode, as documented.
    auto n = limiter->Acquire("another-new-key");
    EXPECT_EQ(n->allowed, mode == FailureMode::kFailOpen);
  }
}

TEST(MemoryStore, GrowsAndKeepsEveryKey) {
  Harness h({Policy::FixedWindow("p", 3, std::chrono::minutes(1))});
  for (int i = 0; i < 50000; ++i) ASSERT_TRUE(h.Take("key-" + std::to_string(i)).allowed);
  for (int i = 0; i < 50000; ++i) {
    ASSERT_EQ(h.limiter->Peek("key-" + std::to_string(i))->remaining, 2u) << i;
  }
  EXPECT_EQ(h.store->Stats().keys, 50000u);
}

TEST(MemoryStore, LongKeysLiveOnTheHeap) {
  Harness h({Policy::FixedWindow("p", 2, std::chrono::minutes(1))});
  const std::string long_key(200, 'z');
  EXPECT_EQ(h.TakeN(3, long_key), 2);
  EXPECT_EQ(h.TakeN(3, long_key + "y"), 2);
}

TEST(MemoryStore, ResetForgetsAKey) {
  Harness h({Policy::TokenBucket("b", 3, 1, std::chrono::hours(1))});
  EXPECT_EQ(h.TakeN(5), 3);
  ASSERT_TRUE(h.limiter->Reset("k").ok());
  EXPECT_EQ(h.TakeN(5), 3);
}

// Several threads on one key never get more than the exact algorithms allow.
TEST(MemoryStore, ConcurrentCallersOnOneKeyStayExact) {
  const Algorithm exact[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                             Algorithm::kTokenBucket, Algorithm::kGcra,
                             Algorithm::kSlidingWindowCounter};
  for (Algorithm a : exact) {
    Harness h({Make(a, 1000, kMin)});
    std::atomic<int> allowed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 2000; ++i) {
          if (h.limiter->Acquire("hot")->allowed) allowed.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    // The clock does not move: exactly the capacity passes, not one more.
    EXPECT_EQ(allowed.load(), 1000) << AlgorithmName(a);
  }
}

// MemoryStore::RunOne starts loading a key's slot before it takes the shard lock: it
// reads the table's address without the lock while other threads grow that table
// (under TSan, a plain read there is a reported race). That changes no decision: every
// key inserted meanwhile is kept and decided exactly, and the racing peeks (cost 0)
// store nothing.
TEST(MemoryStore, RunOneWhileTablesGrowChangesNothing) {
  auto store = std::make_shared<MemoryStore>(MemoryStoreOptions{.shards = 1});
  const Policy p = Make(Algorithm::kFixedWindow, 1, kMin);
  ManualClock clock(kNoon);
  std::atomic<bool> done{false};
  std::thread peeker([&] {
    std::uint64_t i = 0;
    while (!done.load(std::memory_order_relaxed)) {
      const std::string key = "sluice:{peek" + std::to_string(i++ % 5000) + "}:p";
      const StoreCheck c{.policy = &p, .key = key, .cost = 0};
      Decision d;
      EXPECT_TRUE(store->RunOne(c, clock, &d).ok());
      EXPECT_TRUE(d.allowed);
    }
  });
  // One unit of key i at kNoon, one check alone; odd keys through RunOne, even through Run.
  auto take = [&](int i) {
    const std::string key = "sluice:{k" + std::to_string(i) + "}:p";
    const StoreCheck c{.policy = &p, .key = key};
    Decision d;
    if (i % 2 == 1) {
      EXPECT_TRUE(store->RunOne(c, clock, &d).ok());
    } else {
      EXPECT_TRUE(store
                      ->Run({.checks = std::span<const StoreCheck>(&c, 1), .now = kNoon},
                            std::span<Decision>(&d, 1))
                      .ok());
    }
    return d.allowed;
  };
  for (int i = 0; i < 5000; ++i) EXPECT_TRUE(take(i)) << i;
  done = true;
  peeker.join();
  EXPECT_EQ(store->Stats().keys, 5000u);
  for (int i = 0; i < 5000; i += 97) EXPECT_FALSE(take(i)) << i;  // each took its one unit
}

// RunOne validates its check as Run does.
TEST(MemoryStore, RunOneValidatesAsRun) {
  MemoryStore store;
  const Policy p = Make(Algorithm::kFixedWindow, 2, kMin);
  ManualClock clock(kNoon);
  Decision d;
  EXPECT_EQ(store.RunOne(StoreCheck{.policy = &p, .key = ""}, clock, &d).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(store.RunOne(StoreCheck{.policy = &p, .key = "k", .cost = 3}, clock, &d).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(store.RunOne(StoreCheck{.policy = &p, .key = "k"}, clock, &d).ok());
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 1u);
}

// A one-check decision on a live key is decided in place (memory_store.cc, EvaluateOne);
// the same check in a batch of two takes the general path. Both must agree exactly: the
// same random sequence of costs and time steps runs against two stores, one asked one
// check at a time, the other with a peek of an untouched key beside each check (a peek
// of an empty key is allowed, so the batch commits exactly when the check is allowed).
TEST(MemoryStore, OneCheckPathDecidesAsTheBatchPath) {
  const Algorithm all[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                           Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket,
                           Algorithm::kGcra};
  for (Algorithm a : all) {
    const Policy p = Make(a, 20, kSec);
    MemoryStore one, batched;
    std::uint64_t seed = 42;
    auto next = [&seed](std::uint64_t n) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      return (seed >> 33) % n;
    };
    const std::string keys[] = {"sluice:{a}:p", "sluice:{b}:p", "sluice:{c}:p"};
    Micros now = kNoon;
    for (int i = 0; i < 3000; ++i) {
      now += static_cast<Micros>(next(4) == 0 ? next(kSec) : next(20'000));
      const StoreCheck c{.policy = &p, .key = keys[next(3)], .cost = next(4)};
      Decision d1, d2[2];
      ASSERT_TRUE(one.Run({.checks = std::span<const StoreCheck>(&c, 1), .now = now},
                          std::span<Decision>(&d1, 1))
                      .ok());
      const StoreCheck pair[] = {c, {.policy = &p, .key = "sluice:{peek}:p", .cost = 0}};
      ASSERT_TRUE(batched.Run({.checks = pair, .now = now}, d2).ok());
      SCOPED_TRACE(std::string(AlgorithmName(a)) + " step " + std::to_string(i));
      EXPECT_EQ(d1.allowed, d2[0].allowed);
      EXPECT_EQ(d1.remaining, d2[0].remaining);
      EXPECT_EQ(d1.reset_after, d2[0].reset_after);
      EXPECT_EQ(d1.retry_after, d2[0].retry_after);
      EXPECT_EQ(d1.limit, d2[0].limit);
    }
  }
}

}  // namespace
}  // namespace sluice::testing
