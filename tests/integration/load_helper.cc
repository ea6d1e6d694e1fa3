// Helper process for concurrency_test.cc: hammers one key under each algorithm from
// many threads through a Limiter on a RedisStore (Redis's own clock) for at least
// <duration-ms>, and on until it has been denied on every algorithm (at most
// kLoadCap more), then prints one line per policy: "<name> <allowed> <denied> <errors>".
//
//   sluice_redis_load_helper <redis-url> <duration-ms> <threads>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "concurrency_policies.h"
#include "load_loop.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <redis-url> <duration-ms> <threads>\n", argv[0]);
    return 2;
  }
  sluice::RedisStoreOptions so;
  so.url = argv[1];
  so.call_timeout = 2'000'000;
  so.on_warning = [](std::string_view) {};
  auto store = sluice::RedisStore::Create(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  sluice::LimiterOptions lo;
  lo.policies = sluice::testing::ConcurrencyPolicies();
  lo.store = *store;
  lo.deny_cache = false;  // every decision is made by Redis
  auto limiter = sluice::Limiter::Create(std::move(lo));
  if (!limiter.ok()) return 1;
  const std::size_t n = (*limiter)->policies().size();
  sluice::testing::LoadCounts counts(n);
  const auto step = [&](std::size_t i) {
    const std::size_t p = i % n;
    sluice::Check c{p, "shared", 1};
    auto d = (*limiter)->Acquire(std::span<const sluice::Check>(&c, 1));
    counts.Count(p, d.ok() && d->source == sluice::DecisionSource::kStore, d.ok() && d->allowed);
  };
  const auto every_policy_denied = [&] {
    for (std::size_t p = 0; p < n; ++p) {
      if (counts.denied[p].load() == 0) return false;
    }
    return true;
  };
  sluice::testing::RunLoad(std::atoi(argv[3]), std::chrono::milliseconds(std::atol(argv[2])), step,
                           every_policy_denied);
  std::vector<std::string> names;
  for (const auto& p : (*limiter)->policies()) names.push_back(p.name);
  counts.Print(names);
  return 0;
}
