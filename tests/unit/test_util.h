// Shared helpers for unit tests: run a Limiter over a manual clock.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "sluice/clock.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice::testing {

inline constexpr Micros kSec = 1'000'000;
inline constexpr Micros kMin = 60 * kSec;
// 2026-07-30 12:00:00 UTC, a minute boundary like the article's example.
inline constexpr Micros kNoon = 1785412800LL * kSec;

struct Harness {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::unique_ptr<Limiter> limiter;

  explicit Harness(std::vector<Policy> policies, bool shadow = false) {
    LimiterOptions o;
    o.policies = std::move(policies);
    o.store = store;
    o.clock = clock;
    o.shadow = shadow;
    auto r = Limiter::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    limiter = std::move(r).value();
  }

  Decision Take(std::string_view key = "k", std::uint64_t cost = 1) {
    auto r = limiter->Acquire(key, cost);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Decision{};
  }
  // Number of allowed among n unit requests at the current time.
  int TakeN(int n, std::string_view key = "k") {
    int ok = 0;
    for (int i = 0; i < n; ++i) ok += Take(key).allowed ? 1 : 0;
    return ok;
  }
};

}  // namespace sluice::testing
