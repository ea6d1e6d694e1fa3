// Core library benchmarks (Google Benchmark): one Limiter::Acquire on an existing key
// with 1M live keys per algorithm, two threads on distinct keys, two threads on one
// hot key. bench/run_core.sh runs them; docs/benchmarks.md reports the figures.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "bench_util.h"
#include "sluice/clock.h"

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

// For reference: the cost of reading the default clock, which every decision does once.
void BM_SteadyEpochClockNow(benchmark::State& state) {
  SteadyEpochClock clock;
  for (auto _ : state) benchmark::DoNotOptimize(clock.Now());
}

// Benchmarks run in registration order, so each algorithm's 1M-key limiter is built
// once and reused by the benchmarks that follow.
void ApplyAlgorithms(benchmark::internal::Benchmark* b) {
  for (int a = 0; a <= 4; ++a) b->Arg(a);
}

BENCHMARK(BM_Acquire1M)->ArgName("algorithm")->Apply(ApplyAlgorithms);
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
BENCHMARK(BM_SteadyEpochClockNow);

}  // namespace
}  // namespace sluice::bench

BENCHMARK_MAIN();
