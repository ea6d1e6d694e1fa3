// Core library benchmarks (Google Benchmark): one Limiter::Acquire on an existing key
// with 1M live keys per algorithm, two threads on distinct keys, two threads on one
// hot key. bench/run_core.sh runs them; docs/benchmarks.md reports the figures.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "memory/memory_store_internal.h"
#include "sluice/clock.h"
#include "sluice/key.h"

namespace sluice::bench {
namespace {

constexpr std::size_t kLiveKeys = 1'000'000;

const std::vector<char>& Keys() {
  static const std::vector<char> keys = MakeKeys(kLiveKeys);
  return keys;
}

std::string_view Key(std::size_t i) {
  return {Keys().data() + (i % kLiveKeys) * kKeyLen, kKeyLen};
}

// One limiter holding kLiveKeys live keys, built once per algorithm and kept while
// consecutive benchmarks use the same algorithm (building it takes about a second).
Limiter& Populated(Algorithm a) {
  static std::mutex mu;
  static std::unique_ptr<Limiter> limiter;
  static int current = -1;
  std::lock_guard<std::mutex> lock(mu);
  if (current != static_cast<int>(a)) {
    limiter.reset();
    limiter = MakeLimiter(a);
    for (std::size_t i = 0; i < kLiveKeys; ++i) {
      auto d = limiter->Acquire(Key(i));
      if (!d.ok() || !d->allowed) std::abort();
    }
    current = static_cast<int>(a);
  }
  return *limiter;
}

void Check(const Result<Decision>& d, benchmark::State& state) {
  if (!d.ok() || !d->allowed) state.SkipWithError("unexpected denial or error");
}

// One decision on an existing key, keys visited in an order unrelated to their slots.
void BM_Acquire1M(benchmark::State& state) {
  const auto a = static_cast<Algorithm>(state.range(0));
  Limiter& limiter = Populated(a);
  std::size_t i = 0;
  for (auto _ : state) {
    auto d = limiter.Acquire(Key(i++));
    benchmark::DoNotOptimize(d);
    Check(d, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(AlgorithmName(a));
}

// Like BM_Acquire1M, but the requests cycle over `range(1)` of the 1M live keys, so
// the state they touch stays in the CPU caches: the cost of a decision without the
// memory latency of a random key.
void BM_Acquire1MHotSet(benchmark::State& state) {
  const auto a = static_cast<Algorithm>(state.range(0));
  const auto hot = static_cast<std::size_t>(state.range(1));
  Limiter& limiter = Populated(a);
  std::size_t i = 0;
  for (auto _ : state) {
    auto d = limiter.Acquire(Key(i));
    i = i + 1 == hot ? 0 : i + 1;
    benchmark::DoNotOptimize(d);
    Check(d, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(AlgorithmName(a));
}

// N threads, each on its own quarter of the 1M keys: throughput should scale.
void BM_DistinctKeys1M(benchmark::State& state) {
  const auto a = static_cast<Algorithm>(state.range(0));
  Limiter& limiter = Populated(a);
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * (kLiveKeys / 4);
  for (auto _ : state) {
    auto d = limiter.Acquire(Key(i++));
    benchmark::DoNotOptimize(d);
    Check(d, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(AlgorithmName(a));
}

// N threads on one key: every decision takes the same shard lock.
void BM_HotKey(benchmark::State& state) {
  const auto a = static_cast<Algorithm>(state.range(0));
  Limiter& limiter = Populated(a);
  const std::string_view key = Key(42);
  for (auto _ : state) {
    auto d = limiter.Acquire(key);
    benchmark::DoNotOptimize(d);
    Check(d, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(AlgorithmName(a));
}

// The shard MemoryStore puts a caller key in (default options).
std::size_t ShardOf(const Limiter& limiter, std::string_view key) {
  const std::string store_key = *StoreKey("sluice", key, limiter.policies()[0].name);
  return memory_internal::ShardIndex(memory_internal::HashKey(store_key),
                                     MemoryStoreOptions{}.shards);
}

// N threads, each on a key of its own (and 1M other live keys). Thread i takes the
// first key at or after 42 + i whose shard no lower thread uses, so the threads share
// no lock: what scales is everything but the lock.
void BM_OwnKeyPerThread(benchmark::State& state) {
  const auto a = static_cast<Algorithm>(state.range(0));
  Limiter& limiter = Populated(a);
  std::size_t index = 42;
  std::vector<std::size_t> taken;
  for (int t = 0; t <= state.thread_index(); ++t) {
    while (std::find(taken.begin(), taken.end(), ShardOf(limiter, Key(index))) != taken.end()) {
      ++index;
    }
    taken.push_back(ShardOf(limiter, Key(index)));
    if (t < state.thread_index()) ++index;
  }
  const std::string_view key = Key(index);
  for (auto _ : state) {
    auto d = limiter.Acquire(key);
    benchmark::DoNotOptimize(d);
    Check(d, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(AlgorithmName(a));
}

// The reference the in-process goals are measured against: the limiter one would write
// by hand in a few lines. One std::unordered_map<std::string, double> of GCRA
// theoretical arrival times behind one std::mutex, time from std::chrono::steady_clock
// read on every call, and the store key ("sluice:{<key>}:api", no escaping) built in
// a new std::string on every call. Same policy as BenchPolicy(kGcra): one unit per
// hour, burst 1e9, so it never denies during a run.
class NaiveLimiter {
 public:
  bool Acquire(std::string_view key) {
    std::string k = "sluice:{";
    k.append(key);
    k.append("}:api");
    const double now = static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now().time_since_epoch())
                                               .count());
    std::lock_guard<std::mutex> lock(mu_);
    double& tat = tat_[std::move(k)];
    const double new_tat = std::max(tat, now) + kInterval;
    if (new_tat - now > kTau) return false;
    tat = new_tat;
    return true;
  }

 private:
  static constexpr double kInterval = 3'600'000'000.0;  // 1 per hour, in microseconds
  static constexpr double kTau = kInterval * 1e9;
  std::mutex mu_;
  std::unordered_map<std::string, double> tat_;
};

NaiveLimiter& NaivePopulated() {
  static NaiveLimiter* limiter = [] {
    auto* l = new NaiveLimiter;
    for (std::size_t i = 0; i < kLiveKeys; ++i) {
      if (!l->Acquire(Key(i))) std::abort();
    }
    return l;
  }();
  return *limiter;
}

void CheckNaive(bool allowed, benchmark::State& state) {
  if (!allowed) state.SkipWithError("unexpected denial");
}

// The naive reference on the same 1M keys, in the same access patterns as
// BM_Acquire1M, BM_Acquire1MHotSet and BM_HotKey.
void BM_Naive1M(benchmark::State& state) {
  NaiveLimiter& limiter = NaivePopulated();
  std::size_t i = 0;
  for (auto _ : state) {
    const bool ok = limiter.Acquire(Key(i++));
    benchmark::DoNotOptimize(ok);
    CheckNaive(ok, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("naive gcra");
}

void BM_Naive1MHotSet(benchmark::State& state) {
  NaiveLimiter& limiter = NaivePopulated();
  const auto hot = static_cast<std::size_t>(state.range(0));
  std::size_t i = 0;
  for (auto _ : state) {
    const bool ok = limiter.Acquire(Key(i));
    i = i + 1 == hot ? 0 : i + 1;
    benchmark::DoNotOptimize(ok);
    CheckNaive(ok, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("naive gcra");
}

void BM_NaiveHotKey(benchmark::State& state) {
  NaiveLimiter& limiter = NaivePopulated();
  const std::string_view key = Key(42);
  for (auto _ : state) {
    const bool ok = limiter.Acquire(key);
    benchmark::DoNotOptimize(ok);
    CheckNaive(ok, state);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("naive gcra");
}

// For reference: the cost of reading the default clock, which every decision does once.
void BM_SteadyEpochClockNow(benchmark::State& state) {
  SteadyEpochClock clock;
  for (auto _ : state) benchmark::DoNotOptimize(clock.Now());
}

// For reference: the memory latency floor of this machine. One dependent load from a
// random cache line of a 64 MiB array (about the size of the store's tables at 1M
// keys), as a decision on a random existing key must do at least once.
void BM_RandomLoad64MiB(benchmark::State& state) {
  constexpr std::size_t kLines = (std::size_t{64} << 20) / 64;
  struct alignas(64) Line {
    std::uint64_t next;
  };
  std::vector<Line> lines(kLines);
  // One random cycle through every line (Sattolo's algorithm), so each load depends
  // on the previous one and the prefetcher cannot guess the next.
  std::vector<std::uint64_t> perm(kLines);
  for (std::size_t i = 0; i < kLines; ++i) perm[i] = i;
  std::uint64_t x = 88172645463325252ULL;
  for (std::size_t i = kLines - 1; i > 0; --i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(perm[i], perm[x % i]);
  }
  for (std::size_t i = 0; i < kLines; ++i) lines[perm[i]].next = perm[(i + 1) % kLines];
  std::uint64_t at = 0;
  for (auto _ : state) {
    at = lines[at].next;
    benchmark::DoNotOptimize(at);
  }
}

// Benchmarks run in registration order, so each algorithm's 1M-key limiter is built
// once and reused by the benchmarks that follow.
void ApplyAlgorithms(benchmark::internal::Benchmark* b) {
  for (int a = 0; a <= 4; ++a) b->Arg(a);
}
void ApplyAlgorithmsHot(benchmark::internal::Benchmark* b) {
  for (int a = 0; a <= 4; ++a) b->Args({a, 4096});
}

BENCHMARK(BM_Acquire1M)->ArgName("algorithm")->Apply(ApplyAlgorithms);
BENCHMARK(BM_Acquire1MHotSet)->ArgNames({"algorithm", "hot_keys"})->Apply(ApplyAlgorithmsHot);
BENCHMARK(BM_DistinctKeys1M)
    ->ArgName("algorithm")
    ->Arg(static_cast<int>(Algorithm::kGcra))
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_HotKey)
    ->ArgName("algorithm")
    ->Arg(static_cast<int>(Algorithm::kGcra))
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_OwnKeyPerThread)
    ->ArgName("algorithm")
    ->Arg(static_cast<int>(Algorithm::kGcra))
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_Naive1M);
BENCHMARK(BM_Naive1MHotSet)->ArgName("hot_keys")->Arg(4096);
BENCHMARK(BM_NaiveHotKey)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_SteadyEpochClockNow);
BENCHMARK(BM_RandomLoad64MiB);

}  // namespace
}  // namespace sluice::bench

BENCHMARK_MAIN();
