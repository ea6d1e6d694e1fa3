// Shared helpers for the core benchmarks: policies that always allow (so that every
// measured call is a full decision that consumes) and 16-byte caller keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/policy.h"

namespace sluice::bench {

// Caller keys are exactly this long ("u" + 15 digits), as in the goals.
inline constexpr std::size_t kKeyLen = 16;

// Capacity 1e9 and (bucket, GCRA) a refill of one unit per hour: no decision in a
// benchmark run is ever denied, and no key is back to "full" (so none expires) during
// a run, so every call decides on an existing key and consumes.
inline Policy BenchPolicy(Algorithm a) {
  using std::chrono::hours;
  constexpr std::uint64_t kHuge = 1'000'000'000;
  switch (a) {
    case Algorithm::kFixedWindow:
      return Policy::FixedWindow("api", kHuge, hours(1));
    case Algorithm::kSlidingWindowLog:
      return Policy::SlidingWindowLog("api", 1'000'000, hours(1));
    case Algorithm::kSlidingWindowCounter:
      return Policy::SlidingWindowCounter("api", kHuge, hours(1));
    case Algorithm::kTokenBucket:
      return Policy::TokenBucket("api", kHuge, 1, hours(1));
    case Algorithm::kGcra:
      return Policy::Gcra("api", 1, hours(1), kHuge);
    case Algorithm::kConcurrency:  // not a rate: bench/permit_bench.cc
      break;
  }
  return {};
}

// A limiter with the library defaults (MemoryStore, SteadyEpochClock, prefix
// "sluice"), as a user gets from Limiter::Create.
inline std::unique_ptr<Limiter> MakeLimiter(Algorithm a) {
  LimiterOptions o;
  o.policies = {BenchPolicy(a)};
  auto r = Limiter::Create(std::move(o));
  if (!r.ok()) {
    std::fprintf(stderr, "Limiter::Create: %s\n", r.status().ToString().c_str());
    std::abort();
  }
  return std::move(r).value();
}

// Writes caller key number `i` ("u000000000000042") into `buf` (kKeyLen bytes).
inline std::string_view KeyAt(std::uint64_t i, char* buf) {
  buf[0] = 'u';
  for (std::size_t p = kKeyLen; p-- > 1;) {
    buf[p] = static_cast<char>('0' + i % 10);
    i /= 10;
  }
  return {buf, kKeyLen};
}

// `n` keys packed back to back (n * kKeyLen bytes), walked in order by benchmarks:
// consecutive keys hash to unrelated slots, so store accesses are random.
inline std::vector<char> MakeKeys(std::size_t n) {
  std::vector<char> keys(n * kKeyLen);
  for (std::size_t i = 0; i < n; ++i) KeyAt(i, keys.data() + i * kKeyLen);
  return keys;
}

}  // namespace sluice::bench
