// Sentinel failover drills under load: threads decide all the while through a
// RedisStore that found its primary through the sentinels, and the primary is failed
// over (SENTINEL FAILOVER) or killed (kill -9). Each drill asserts that no call waits
// past its deadline, that no error reaches a Limiter caller (the failure mode decides
// while the store cannot), that decisions come from the store again within a bound, and
// that the only over-admission is the writes the failover lost (asynchronous
// replication), measured and bounded. The figures are printed (and recorded as test
// properties); docs/redis.md quotes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "redis_sentinel.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr Micros kCallTimeout = 100'000;
// Scheduling slack on a loaded 2-core machine (as in faults_test.cc): the bound is
// about hangs (a call held until discovery ends), not speed.
constexpr auto kMargin = milliseconds(1000);
constexpr int kThreads = 4;
// Bound on the writes a failover may lose, as milliseconds of the drill's traffic. The
// loss is the traffic between the promotion and the store's switch: 3-18 ms here on a
// quiet machine, about 1 s when the machine is overloaded (load above 8) and Sentinel's
// own steps slow down. A store that did not follow the promotion would lose everything
// until Sentinel demotes the old primary, about 10 s: the bound tells the two apart.
constexpr double kMaxLostMs = 3'000;
// Keys whose limit is never reached: what the store counted against what callers saw
// allowed gives the writes the failover lost.
constexpr int kWideKeys = 8;
constexpr std::uint64_t kWideLimit = 1'000'000'000;
// Keys that reach their limit during the drill: over-admission shows up here.
constexpr int kTightKeys = 4;
constexpr std::uint64_t kTightLimit = 2'000;

struct DrillFigures {
  std::uint64_t calls = 0;
  std::uint64_t failure_mode = 0;  // decisions the failure mode made
  double outage_ms = 0;            // fault to the last failure-mode decision
  double recovered_ms = 0;         // fault to decisions from the new primary
  double switched_ms = 0;          // fault to the sentinels reporting the new primary
  double lag_ms = 0;               // the sentinels' switch to the store's (0 if earlier)
  std::int64_t lost_writes = 0;    // allowed by the store, then lost with the old primary
  double lost_ms = 0;              // the same, as milliseconds of the drill's traffic
  std::int64_t over_admitted = 0;  // allowed beyond kTightLimit on the tight keys
};

// Runs load through a store on `group`, injects `fault` once the load is flowing, and
// measures. `fault` returns once the sentinels report the new primary.
DrillFigures RunDrill(RedisSentinelGroup& group, const std::function<Status()>& fault,
                      const char* name) {
  DrillFigures f;
  RedisStoreOptions so;
  so.url = group.Url();
  so.call_timeout = kCallTimeout;
  so.connect_timeout = 500'000;
  so.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(so);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return f;
  LimiterOptions lo;
  Policy wide = Policy::FixedWindow("wide", kWideLimit, std::chrono::hours(24 * 300));
  Policy tight = Policy::FixedWindow("tight", kTightLimit, std::chrono::hours(24 * 300));
  wide.failure_mode = tight.failure_mode = FailureMode::kFailClosed;
  auto make = [&](const Policy& p) {
    LimiterOptions o;
    o.policies = {p};
    o.store = *store;
    o.deny_cache = false;  // every decision asks the store
    auto l = Limiter::Create(std::move(o));
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(*l) : nullptr;
  };
  auto wide_limiter = make(wide);
  auto tight_limiter = make(tight);
  if (!wide_limiter || !tight_limiter) return f;

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> calls{0}, late{0}, errors{0}, failure_mode{0}, store_decisions{0};
  std::atomic<std::int64_t> allowed_wide[kWideKeys] = {}, allowed_tight[kTightKeys] = {};
  std::atomic<std::int64_t> last_failure_ns{0};
  std::atomic<std::int64_t> worst_us{0};
  const auto epoch = steady_clock::now();
  auto since_epoch_ns = [&](steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch).count();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Bounded in count and time whatever happens.
      const auto end = steady_clock::now() + std::chrono::seconds(120);
      for (std::uint64_t i = 0;
           i < 2'000'000 && !stop.load(std::memory_order_relaxed) && steady_clock::now() < end;
           ++i) {
        const bool is_tight = (i + t) % 4 == 0;
        const int k = static_cast<int>((i / 4 + t) % (is_tight ? kTightKeys : kWideKeys));
        const std::string key = (is_tight ? "t" : "w") + std::to_string(k);
        const auto start = steady_clock::now();
        auto d = (is_tight ? *tight_limiter : *wide_limiter).Acquire(key);
        const auto took = steady_clock::now() - start;
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(took).count();
        if (us > worst_us.load(std::memory_order_relaxed)) worst_us.store(us);
        if (took > std::chrono::microseconds(kCallTimeout) + kMargin) ++late;
        ++calls;
        if (!d.ok()) {
          ++errors;
          continue;
        }
        if (d->source != DecisionSource::kStore) {
          ++failure_mode;
          last_failure_ns.store(since_epoch_ns(steady_clock::now()));
          // A refused caller backs off a little, as a real one would: spinning on calls
          // that fail at once (the primary is down) only burns the CPU that the
          // failover and the other threads need on a loaded 2-core machine.
          std::this_thread::sleep_for(milliseconds(1));
          continue;
        }
        ++store_decisions;
        if (d->allowed) ++(is_tight ? allowed_tight[k] : allowed_wide[k]);
      }
    });
  }
  // Fault once the load flows (an event: store decisions counted), within a bound.
  const auto flowing_by = steady_clock::now() + std::chrono::seconds(30);
  while (store_decisions.load() < 3000 && steady_clock::now() < flowing_by) {
    std::this_thread::sleep_for(milliseconds(10));  // polling a counter, not timing
  }
  EXPECT_GE(store_decisions.load(), 3000u) << "the load never flowed";
  const std::uint64_t before_fault = store_decisions.load();
  const auto fault_at = steady_clock::now();
  const double load_ms = std::chrono::duration<double, std::milli>(fault_at - epoch).count();
  // The only replica is the node that will be promoted; probe it while the fault runs,
  // so the recovery time is the store's, not the fixture's.
  RedisServer& next = group.replica();
  RedisServer& old = group.primary();
  Status s;
  std::atomic<std::int64_t> switched_ns{0};
  std::thread faulting([&] {
    s = fault();
    switched_ns.store(since_epoch_ns(steady_clock::now()));
  });
  // Recovered: a decision on a fresh key lands on the new primary. How long Sentinel
  // takes to fail over is Sentinel's (on a loaded machine an election can fail and be
  // retried after failover-timeout), so the bound on the store runs from the moment the
  // sentinels report the new primary (fault() returned, itself bounded), not from the
  // fault.
  auto past_bound = [&] {
    const std::int64_t at = switched_ns.load();
    return at != 0 && since_epoch_ns(steady_clock::now()) - at > 30'000'000'000LL;
  };
  bool recovered = false;
  for (int probe = 0; !recovered && !past_bound(); ++probe) {
    const std::string key = "probe" + std::to_string(probe);
    auto d = wide_limiter->Acquire(key);
    if (d.ok() && d->source == DecisionSource::kStore) {
      auto k = StoreKey("sluice", key, "wide");
      // On the new primary and not on the old one: before the promotion, a write on the
      // old primary reaches the replica too.
      auto on_next = next.Command({"EXISTS", *k});
      auto on_old = old.Command({"EXISTS", *k});  // fails once the old one is killed
      recovered = on_next.ok() && on_next->integer == 1 && !(on_old.ok() && on_old->integer == 1);
    }
    if (!recovered) std::this_thread::sleep_for(milliseconds(5));  // polling, not timing
  }
  const auto recovered_at = steady_clock::now();
  f.recovered_ms = std::chrono::duration<double, std::milli>(recovered_at - fault_at).count();
  faulting.join();
  f.switched_ms = (switched_ns.load() - since_epoch_ns(fault_at)) / 1e6;
  f.lag_ms = std::max(0.0, (since_epoch_ns(recovered_at) - switched_ns.load()) / 1e6);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(group.primary().port(), next.port());
  EXPECT_TRUE(recovered) << name << ": decisions never reached the new primary (port "
                         << next.port() << ")";
  // Keep deciding on the new primary for a while (an event: more store decisions).
  const std::uint64_t at_recovery = store_decisions.load();
  const auto settle_by = steady_clock::now() + std::chrono::seconds(30);
  while (store_decisions.load() < at_recovery + 2000 && steady_clock::now() < settle_by) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  stop = true;
  for (auto& t : threads) t.join();

  f.calls = calls.load();
  f.failure_mode = failure_mode.load();
  const std::int64_t last_ns = last_failure_ns.load();
  f.outage_ms = last_ns == 0 ? 0 : std::max(0.0, (last_ns - since_epoch_ns(fault_at)) / 1e6);
  // What the new primary holds against what callers were allowed.
  auto stored = [&](Limiter& l, const std::string& key, std::uint64_t limit) -> std::int64_t {
    auto d = l.Peek(key);
    EXPECT_TRUE(d.ok() && d->source == DecisionSource::kStore) << key;
    return d.ok() ? static_cast<std::int64_t>(limit - d->remaining) : 0;
  };
  for (int k = 0; k < kWideKeys; ++k) {
    const std::int64_t held = stored(*wide_limiter, "w" + std::to_string(k), kWideLimit);
    f.lost_writes += std::max<std::int64_t>(0, allowed_wide[k].load() - held);
  }
  for (int k = 0; k < kTightKeys; ++k) {
    const std::int64_t held = stored(*tight_limiter, "t" + std::to_string(k), kTightLimit);
    // allowed <= limit + lost writes (allowed - held) holds exactly when the new
    // primary never holds more than the limit: the store itself does not over-admit.
    EXPECT_LE(held, static_cast<std::int64_t>(kTightLimit)) << "the store itself over-counted";
    f.over_admitted +=
        std::max<std::int64_t>(0, allowed_tight[k].load() - static_cast<std::int64_t>(kTightLimit));
  }
  // Lost writes as time: the store decision rate before the fault.
  const double rate_per_ms = before_fault / std::max(load_ms, 1.0);
  // 3 of 4 decisions are on the wide keys.
  f.lost_ms = f.lost_writes / std::max(0.75 * rate_per_ms, 1e-9);

  EXPECT_EQ(late.load(), 0u) << name << ": a call waited past its deadline (worst "
                             << worst_us.load() << " us)";
  EXPECT_EQ(errors.load(), 0u) << name << ": an error reached a Limiter caller";
  std::printf(
      "[drill] %s: calls=%llu failure_mode=%llu outage=%.0f ms recovered=%.0f ms "
      "sentinels_switched=%.0f ms store_lag=%.0f ms lost_writes=%lld (~%.0f ms of traffic) "
      "over_admitted=%lld worst_call=%lld us "
      "rate=%.1f/ms\n",
      name, static_cast<unsigned long long>(f.calls),
      static_cast<unsigned long long>(f.failure_mode), f.outage_ms, f.recovered_ms, f.switched_ms,
      f.lag_ms, static_cast<long long>(f.lost_writes), f.lost_ms,
      static_cast<long long>(f.over_admitted), static_cast<long long>(worst_us.load()),
      rate_per_ms);
  ::testing::Test::RecordProperty("outage_ms", static_cast<int>(f.outage_ms));
  ::testing::Test::RecordProperty("recovered_ms", static_cast<int>(f.recovered_ms));
  ::testing::Test::RecordProperty("lost_writes", static_cast<int>(f.lost_writes));
  ::testing::Test::RecordProperty("over_admitted", static_cast<int>(f.over_admitted));
  return f;
}

// How long the drills wait for the sentinels to report the new primary. Sentinel's own
// time: under the CI's drills x4 step (the fuzzers on both cores) one kill -9 took more
// than 60 s to be reported, elections failing and retried after failover-timeout; the
// store followed within 9 s of it. The ctest timeout (300 s) leaves room for the rest.
constexpr int kSentinelFailoverBoundMs = 150'000;

TEST(SentinelDrill, ManualFailoverUnderLoad) {
  auto group = RedisSentinelGroup::Start();
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  DrillFigures f = RunDrill(
      g, [&] { return g.Failover(kSentinelFailoverBoundMs); }, "SENTINEL FAILOVER");
  // Bounds: measured 0.2-0.4 s and 3-18 ms on a loaded 2-core machine (docs/redis.md),
  // with headroom. Without following the promotion the store would stay on the old
  // primary until Sentinel demotes it (~10 s) and lose all those writes. The store's
  // recovery counts from the sentinels' switch: under CI's fuzz load Sentinel itself
  // once took 34.5 s to promote (the store followed 2 ms later), which is not the
  // client's to bound.
  EXPECT_LT(f.recovered_ms - f.switched_ms, 5'000);
  EXPECT_LT(f.lost_ms, kMaxLostMs) << "lost more than 3 s of writes";
}

TEST(SentinelDrill, KilledPrimaryUnderLoad) {
  auto group = RedisSentinelGroup::Start();
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  RedisSentinelGroup& g = **group;
  DrillFigures f = RunDrill(
      g, [&] { return g.KillPrimary(kSentinelFailoverBoundMs); }, "kill -9 primary");
  EXPECT_GT(f.failure_mode, 0u) << "a dead primary cannot decide: the failure mode must";
  // down-after-milliseconds (1 s) + agreement + election + promotion took 1.3-1.6 s
  // here, but on a loaded machine an election can fail and wait failover-timeout: that
  // is Sentinel's time. The store's part: following the switch once it is reported.
  EXPECT_LT(f.lag_ms, 5'000) << "the store followed the sentinels' switch too late";
  EXPECT_LT(f.lost_ms, kMaxLostMs) << "lost more than 3 s of writes";
}

}  // namespace
}  // namespace sluice::testing
