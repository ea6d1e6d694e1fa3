// Policies at the edges of what ValidatePolicy accepts, and the costs a check may ask
// of them: for the tests that run every algorithm and operation at those edges
// (ExtremePolicies on MemoryStore, Differential on Redis, ModuleDifferential through the
// module).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/policy.h"
#include "sluice/store.h"

namespace sluice::testing::edge {

inline constexpr Micros kDay = 86'400'000'000LL;
inline constexpr Micros kYear = 366 * kDay;  // the longest window
inline constexpr std::uint64_t kMaxLimit = 1'000'000'000'000ULL;
inline constexpr Micros kStart = 1785412800LL * 1'000'000;

// The largest burst (or debt) whose refill at limit/window takes at most 366 days.
inline std::uint64_t MostWithinAYear(std::uint64_t limit, Micros window) {
  const unsigned __int128 most =
      static_cast<unsigned __int128>(kYear) * limit / static_cast<unsigned __int128>(window);
  return most > kMaxLimit ? kMaxLimit : static_cast<std::uint64_t>(most);
}

// The policies at the edges: each algorithm, limit 1 or 10^12 (10^3 for the log, which
// keeps an entry per unit), window 1 ms or 366 days, the smallest and largest burst,
// and each overage mode with the largest debt.
inline std::vector<Policy> Policies() {
  std::vector<Policy> out;
  const Algorithm algorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                  Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket,
                                  Algorithm::kGcra};
  for (const Algorithm a : algorithms) {
    const bool log = a == Algorithm::kSlidingWindowLog;
    const bool bucket = a == Algorithm::kTokenBucket || a == Algorithm::kGcra;
    for (const std::uint64_t limit : {std::uint64_t{1}, log ? std::uint64_t{1000} : kMaxLimit}) {
      for (const Micros window : {Micros{1000}, kYear}) {
        std::vector<std::uint64_t> bursts = {0};
        if (bucket) bursts = {1, MostWithinAYear(limit, window)};
        for (const std::uint64_t burst : bursts) {
          for (const Overage overage : {Overage::kReject, Overage::kCharge, Overage::kDrain}) {
            Policy p;
            p.name = "edge";
            p.algorithm = a;
            p.limit = limit;
            p.window = window;
            p.burst = burst;
            p.overage = overage;
            if (overage == Overage::kCharge) {
              p.max_debt = bucket ? MostWithinAYear(limit, window) : log ? limit : kMaxLimit;
            }
            const Status s = ValidatePolicy(p);
            EXPECT_TRUE(s.ok()) << s.message();
            if (s.ok()) out.push_back(p);
          }
        }
      }
    }
  }
  return out;
}

// One check of a sequence on one key: at `now`, `op` with `cost` (and max_wait).
struct Step {
  Micros now = 0;
  StoreOp op = StoreOp::kDecide;
  std::uint64_t cost = 0;
  Micros max_wait = 0;
  std::string Describe() const {
    return "op " + std::to_string(static_cast<int>(op)) + " cost " + std::to_string(cost) +
           " max_wait " + std::to_string(max_wait) + " now " + std::to_string(now);
  }
};

// The sequence of checks on one key of p: time forward by a microsecond and by years,
// and with `back` also back (Redis takes every now as given; MemoryStore decides at the
// latest now it has seen, so a comparison with it keeps time forward). At each instant:
// decisions, refunds and penalties of every cost from 1 to the most a check may ask
// (and 0, a peek), plain and, under overage reject, reservations waiting up to the window.
inline std::vector<Step> Steps(const Policy& p, bool back) {
  const Micros moves[] = {0, 1, kYear / 2, -kYear, 3 * kYear, 1, -1, kYear};
  std::vector<Step> out;
  Micros now = kStart;
  for (const Micros move : moves) {
    if (move < 0 && !back) continue;
    now += move;
    for (const StoreOp op : {StoreOp::kDecide, StoreOp::kRefund, StoreOp::kPenalize}) {
      const std::uint64_t most = op == StoreOp::kDecide ? p.MaxCost() : p.Capacity();
      std::vector<std::uint64_t> costs = {1, p.Capacity(), most};
      if (op == StoreOp::kDecide) costs.push_back(0);
      for (const std::uint64_t cost : costs) {
        out.push_back({now, op, cost, 0});
        // (a reservation that waits needs overage reject: StoreCheck::max_wait)
        if (op == StoreOp::kDecide && p.overage == Overage::kReject && cost <= p.Capacity()) {
          out.push_back({now, op, cost, p.window});
        }
      }
    }
  }
  return out;
}

inline std::string Describe(const Policy& p) {
  return "(alg " + std::to_string(static_cast<int>(p.algorithm)) + ", limit " +
         std::to_string(p.limit) + ", window " + std::to_string(p.window) + ", burst " +
         std::to_string(p.burst) + ", overage " + std::to_string(static_cast<int>(p.overage)) + ")";
}

}  // namespace sluice::testing::edge
