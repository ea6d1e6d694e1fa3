// The cost of sluiced's top limited keys (issue #24, service/admin_top_keys.h) on the
// decision path: Engine::ShouldRateLimit of denied requests with the summary on and off,
// in one run. Each iteration is one request that its rule denies (the case that feeds
// the summary); `keys` distinct callers take turns, so with keys > 16 most denials
// replace the least counted entry. Counters: top_keys_bytes is the memory of every
// summary made (one per rule that denied), against the engine's without any.
//
//   build/release/bench/sluiced/sluiced_top_keys_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "service/admin_top_keys.h"
#include "service/config.h"
#include "service/engine.h"
#include "sluice/memory_store.h"

namespace {

using sluice::service::Engine;

std::unique_ptr<Engine> MakeEngine(bool top_keys) {
  auto config = sluice::service::ParseConfig(R"(domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
)",
                                             "bench.yaml");
  Engine::Options o;
  o.store = std::make_shared<sluice::MemoryStore>();
  o.top_keys = top_keys;
  auto e = Engine::Create(*config, std::move(o));
  return std::move(*e);
}

void BM_DeniedDecision(benchmark::State& state) {
  const bool top_keys = state.range(0) != 0;
  const auto nkeys = static_cast<std::size_t>(state.range(1));
  auto engine = MakeEngine(top_keys);
  std::vector<std::string> values;
  for (std::size_t i = 0; i < nkeys; ++i) values.push_back("caller-" + std::to_string(i));
  sluice::service::RateLimitRequest req;
  req.domain = "bench";
  req.descriptors.resize(1);
  req.descriptors[0].entries = {{"user", values[0]}};
  sluice::service::RateLimitResponse resp;
  // Every key's one request per hour is used up first: what follows is denied.
  for (const std::string& v : values) {
    req.descriptors[0].entries[0].value = v;
    (void)engine->ShouldRateLimit(req, &resp);
  }
  const std::size_t bytes_before = sluice::service::TopKeysBytes();
  std::size_t i = 0;
  std::uint64_t denied = 0;
  for (auto _ : state) {
    req.descriptors[0].entries[0].value = values[i];
    if (++i == nkeys) i = 0;
    (void)engine->ShouldRateLimit(req, &resp);
    denied += resp.overall_code == sluice::service::Code::kOverLimit;
  }
  if (denied != static_cast<std::uint64_t>(state.iterations())) {
    state.SkipWithError("a request was allowed: the benchmark measures denials");
  }
  // The summaries this engine made (one: its rule's), in bytes.
  state.counters["top_keys_bytes"] =
      static_cast<double>(sluice::service::TopKeysBytes() - bytes_before);
}

BENCHMARK(BM_DeniedDecision)
    ->ArgNames({"top_keys", "keys"})
    ->ArgsProduct({{0, 1}, {1, 16, 100000}});

}  // namespace

BENCHMARK_MAIN();
