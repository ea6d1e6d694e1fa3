// The coalesce differential (coalesce_test.cc, on the scripts; module_store_test.cc, on
// the native module): random bursts of independent batches queued together on one
// connection, merged into shared calls, decided as the in-process model decides them
// one after the other in the order they were sent.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "burst.h"
#include "random_policy.h"
#include "redis/script_wire.h"
#include "redis_server.h"
#include "sluice/key.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"

namespace sluice::testing {

// The lean script lane a batch of `checks` runs in (caller-time mode), as the store
// decides it (redis/script_wire.h).
inline redis::LeanLane LaneOf(std::span<const StoreCheck> checks) {
  redis::WireKind kinds[kMaxBatchChecks];
  redis::WireKinds(checks, StoreOp::kDecide, kinds);
  return redis::LeanLaneOf(checks, {kinds, checks.size()}, /*caller_time=*/true);
}

// True when `c`, decided, is charged if its batch is denied (Policy::overage).
inline bool Charges(const StoreCheck& c) {
  return c.policy->overage != Overage::kReject && c.cost > 0;
}

// True when `g` holds a permit's operation: an acquire (or a peek) of a concurrency
// limit, a release or an extend.
inline bool Permits(const Group& g) {
  return g.op == StoreOp::kRelease || g.op == StoreOp::kExtend ||
         std::any_of(g.checks.begin(), g.checks.end(), [](const StoreCheck& c) {
           return c.policy->algorithm == Algorithm::kConcurrency;
         });
}

// True when `g` keeps a usage record (StoreCheck::usage_id).
inline bool Records(const Group& g) {
  return std::any_of(g.checks.begin(), g.checks.end(),
                     [](const StoreCheck& c) { return !c.usage_id.empty(); });
}

// The merged calls a group can share: a lean script's (its LeanLane), the coalesced
// script's (kNone), or, for a penalty, a permit's operation, a usage record or a group
// with a check of a policy with block_for or one that charges an overage, the batch
// script's (kBatchLane).
inline constexpr int kBatchLane = -1;
// The one lane of a server with the module (ExpectRandomInterleavingsAsModel).
inline constexpr int kModuleLane = -2;
inline int MergeLaneOf(const Group& g) {
  if (g.op == StoreOp::kPenalize || Permits(g) || Records(g)) return kBatchLane;
  for (const StoreCheck& c : g.checks) {
    if (c.policy->block_for > 0 || Charges(c)) return kBatchLane;
  }
  return static_cast<int>(LaneOf(g.checks));
}

// The coalesce differential's policies (RandomPolicy): the five rate algorithms and,
// with `batch`, a third with a block, a fifth whose denials are charged.
inline constexpr Micros kCoalesceWindows[] = {1'000, 250'000, 1'000'000, 3'300'000, 60'000'000};
inline constexpr std::uint64_t kCoalesceLimits[] = {1, 2, 3, 5, 10, 100};
inline PolicyDraw CoalescePolicies(bool batch) {
  return {.windows = kCoalesceWindows,
          .limits = kCoalesceLimits,
          .block_one_in = batch ? 3u : 0u,
          .overage_one_in = batch ? 5u : 0u};
}

// Differential: random bursts of independent batches (random policies of every
// algorithm, keys shared between batches of one burst, peeks, costs up to the
// capacity, time moving forward between and within bursts) decided by coalesced calls
// against MemoryStore (src/core) deciding the same batches one after the other in the
// order they were sent (queued, lane after lane: calls of plain fixed-window checks only
// share the lean fixed-window script's calls, the others the coalesced script's, and
// with `batch`, where a third of the policies have a block_for, a fifth charge an
// overage, a fifth of the batches are penalties, two concurrency limits join the
// policies, a sixth of the batches release or extend a permit and a sixth of the rate
// decisions keep a usage record, calls with such a check, permits and penalties the
// batch script's). `redis` is a store in caller-time mode with one connection on
// `server`; with `module`, that server has the module, whose calls share ONE lane in
// the order they were queued, merged from two groups on.
inline void ExpectRandomInterleavingsAsModel(RedisStore& redis, RedisServer& server, bool batch,
                                             bool module) {
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  int compared = 0, denied = 0;
  std::uint64_t expected_calls = 0, expected_groups = 0, lean_groups = 0;
  std::uint64_t batch_groups = 0, batch_merged = 0, penalties_merged = 0, charges_merged = 0;
  std::uint64_t permits_merged = 0, records_merged = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    MemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 8; ++i) policies.push_back(RandomPolicy(rng, i, CoalescePolicies(batch)));
    if (batch) {  // (leases from a few ms to a minute: some expire within a run)
      static const Micros kLeases[] = {5'000, 250'000, 60'000'000};
      for (int i = 0; i < 2; ++i) {
        policies.push_back(Policy::Concurrency("c" + std::to_string(i), 1 + rng() % 3,
                                               std::chrono::microseconds(kLeases[rng() % 3])));
      }
    }
    std::vector<std::string> held;  // permit ids acquired (maybe released or expired since)
    std::vector<std::string> ids;   // stable storage for the checks' permit and record ids
    const char* callers[] = {"alice", "bob", "carol", "dave"};
    std::vector<std::string> keys;  // stable storage for the checks' keys
    for (const char* c : callers) {
      for (const Policy& p : policies) {
        keys.push_back(*StoreKey("co" + std::to_string(seed), c, p.name));
      }
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int burst = 0; burst < 60; ++burst) {
      const Policy& tp = policies[rng() % policies.size()];
      now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
      // Half the bursts large enough to be merged (kMinCoalescedBatches = 8 in
      // redis_store.cc), half not.
      const std::size_t ngroups = rng() % 2 ? 8 + rng() % 9 : 1 + rng() % 7;
      std::vector<Group> groups(ngroups);
      ids.clear();
      ids.reserve(ngroups * 3);  // (no reallocation: the checks point into it)
      for (Group& g : groups) {
        // (with `batch`, one group in five is a penalty: a cost of 1 up to the capacity;
        // one in six releases or extends a permit)
        const unsigned kind = batch ? rng() % 30 : 30;
        if (kind < 6) {
          g.op = StoreOp::kPenalize;
        } else if (kind < 11) {
          g.op = kind < 8 ? StoreOp::kRelease : StoreOp::kExtend;
        }
        const std::size_t n = 1 + rng() % 3;
        for (std::size_t i = 0; i < n; ++i) {
          const bool permits = g.op == StoreOp::kRelease || g.op == StoreOp::kExtend;
          // (a release or an extend: one of the concurrency limits, the last two; a
          // penalty: one of the rates, the first eight)
          const std::size_t pi = permits                      ? policies.size() - 1 - rng() % 2
                                 : g.op == StoreOp::kPenalize ? rng() % 8
                                                              : rng() % policies.size();
          const Policy& p = policies[pi];
          const bool concurrency = p.algorithm == Algorithm::kConcurrency;
          const std::string& key = keys[(rng() % std::size(callers)) * policies.size() + pi];
          bool dup = false;
          for (const StoreCheck& c : g.checks) dup = dup || c.key == key;
          if (dup) continue;  // the Limiter never sends one key twice in a batch
          const std::uint64_t cost = concurrency ? (rng() % 4 != 0 ? 1 : 0) : RandomCost(rng, p);
          StoreCheck c{
              .policy = &p, .key = key, .cost = g.op == StoreOp::kPenalize && cost == 0 ? 1 : cost};
          if (permits) {  // a permit acquired before (maybe released or expired), or not
            ids.push_back(!held.empty() && rng() % 4 != 0 ? held[rng() % held.size()]
                                                          : RandomId(rng));
            c.permit = ids.back();
          } else if (concurrency && cost == 1) {  // an acquire (cost 0: a peek)
            ids.push_back(RandomId(rng));
            held.push_back(ids.back());
            c.permit = ids.back();
          } else if (batch && !concurrency && g.op == StoreOp::kDecide && rng() % 6 == 0) {
            ids.push_back(RandomId(rng));  // a usage record of what this check takes
            c.usage_id = ids.back();
            c.usage_ttl = 1'000 * static_cast<Micros>(1 + rng() % 10'000);
          }
          g.checks.push_back(c);
        }
      }
      if (held.size() > 64) held.erase(held.begin(), held.begin() + 32);
      // The connection sends calls queued together lane after lane (connection.cc,
      // Emit), each lane in the order it was queued, lanes in the order of their first
      // group: groups of plain fixed-window checks only share the lean fixed-window
      // script's calls, of plain sliding-log checks only the lean sliding-log script's,
      // the others the coalesced script's. Time moves forward in that order.
      // (the module's lane: every group, whatever its script would have been)
      const auto lane_of = [module](const Group& g) {
        return module ? kModuleLane : MergeLaneOf(g);
      };
      std::vector<int> lanes;  // in the order of their first group
      for (const Group& g : groups) {
        if (std::find(lanes.begin(), lanes.end(), lane_of(g)) == lanes.end())
          lanes.push_back(lane_of(g));
      }
      std::vector<std::size_t> order;
      for (const int lane : lanes) {
        for (std::size_t gi = 0; gi < ngroups; ++gi) {
          if (lane_of(groups[gi]) == lane) order.push_back(gi);
        }
      }
      for (const std::size_t gi : order) {
        if (rng() % 3 == 0) now += static_cast<Micros>(rng() % 2000);
        groups[gi].now = now;
      }
      // The lean scripts' lanes are merged from 2 groups on, the coalesced and batch
      // scripts' from 8 (redis_store.cc), the module's from 2.
      std::size_t calls = 0, merged = 0;
      for (const int lane : lanes) {
        std::size_t size = 0;
        for (const Group& g : groups) size += lane_of(g) == lane ? 1 : 0;
        const bool grouped = lane == kBatchLane || lane == static_cast<int>(redis::LeanLane::kNone);
        if (!module && !grouped) lean_groups += size;
        if (size < (module || !grouped ? 2u : 8u)) continue;  // each sent as it is
        ++calls;
        merged += size;
        for (const Group& g : groups) {
          if (lane_of(g) != lane || MergeLaneOf(g) != kBatchLane) continue;
          ++batch_merged;
          penalties_merged += g.op == StoreOp::kPenalize;
          charges_merged +=
              g.op == StoreOp::kDecide && std::any_of(g.checks.begin(), g.checks.end(), Charges);
          permits_merged += Permits(g);
          records_merged += Records(g);
        }
      }
      for (const Group& g : groups) batch_groups += MergeLaneOf(g) == kBatchLane ? 1 : 0;
      const auto before = redis.Stats();
      const std::vector<Outcome> got = Burst(redis, trigger, groups, now);
      const auto after = redis.Stats();
      expected_calls += calls;
      expected_groups += merged;
      ASSERT_EQ(after.coalesced_calls - before.coalesced_calls, calls)
          << "seed " << seed << " burst " << burst;
      ASSERT_EQ(after.coalesced_evaluations - before.coalesced_evaluations, merged);
      ExpectBurstAsModel(memory, groups, got, order,
                         "seed " + std::to_string(seed) + " burst " + std::to_string(burst), denied,
                         compared);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const auto s = redis.Stats();
  EXPECT_EQ(s.coalesced_calls, expected_calls);
  EXPECT_EQ(s.coalesced_evaluations, expected_groups);
  EXPECT_GT(expected_calls, 80u);  // about half the bursts were merged
  if (!module) {
    EXPECT_GT(lean_groups, 0u);  // some in the lean scripts' calls
  }
  EXPECT_GT(denied, 50);  // and the denials were compared too
  EXPECT_GT(compared, 4 * 60 * 3);
  if (batch) {
    // (in merged calls of the batch script, or of the module)
    EXPECT_GT(batch_merged, 100u) << "groups with a block_for or a penalty in merged calls";
    EXPECT_GT(penalties_merged, 30u) << "penalties in merged calls";
    EXPECT_GT(charges_merged, 30u) << "overage decisions in merged calls";
    EXPECT_GT(permits_merged, 30u) << "permits' operations in merged calls";
    EXPECT_GT(records_merged, 30u) << "usage records in merged calls";
  } else {
    EXPECT_EQ(batch_groups, 0u);
  }
  ExpectEveryKeyHasATtl(server);
}

}  // namespace sluice::testing
