// Differential test: the same random request sequences, with caller-supplied time,
// against MemoryStore and RedisStore (caller-time mode) must give identical
// decisions, field by field. This is what keeps the Lua scripts and src/core/*.cc
// in lockstep: any difference in arithmetic, rounding or state handling shows up.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "reference_store.h"
#include "sluice/key.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

std::string Describe(const Policy& p) {
  std::ostringstream o;
  o << p.name << "{" << AlgorithmName(p.algorithm) << " limit=" << p.limit << " window=" << p.window
    << "us burst=" << p.burst
    << " init=" << (p.initial_tokens ? std::to_string(*p.initial_tokens) : "-") << "}";
  return o.str();
}

Policy RandomPolicy(std::mt19937_64& rng, int index) {
  static const Micros kWindows[] = {1'000,     7'000,      250'000,      1'000'000,
                                    3'300'000, 60'000'000, 3'600'000'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100, 1000};
  Policy p;
  p.name = "p" + std::to_string(index);
  p.algorithm = static_cast<Algorithm>(rng() % 5);
  p.limit = kLimits[rng() % std::size(kLimits)];
  if (p.algorithm == Algorithm::kSlidingWindowLog) p.limit = std::min<std::uint64_t>(p.limit, 100);
  p.window = kWindows[rng() % std::size(kWindows)];
  if (p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) {
    if (rng() % 2) p.burst = p.limit + rng() % (2 * p.limit + 1);
    if (p.algorithm == Algorithm::kTokenBucket && rng() % 3 == 0) {
      p.initial_tokens = rng() % (p.Capacity() + 1);
    }
  }
  EXPECT_TRUE(ValidatePolicy(p).ok()) << Describe(p);
  return p;
}

std::uint64_t RandomCost(std::mt19937_64& rng, const Policy& p) {
  switch (rng() % 8) {
    case 0:
      return 0;  // peek
    case 1:
      return 1 + rng() % p.Capacity();
    case 2:
      return p.Capacity();
    default:
      return 1;
  }
}

class Differential : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = SLUICE_DIFFERENTIAL_BACKEND::Make();
    ASSERT_NE(redis_, nullptr);
  }

  // Evaluates `checks` on both stores; false (with a failure) on the first difference.
  bool Compare(Store& memory, std::span<const StoreCheck> checks, Micros now,
               const std::string& where) {
    Decision a[16], b[16];
    Status sa = memory.Evaluate(checks, now, a);
    Status sb = redis_->Evaluate(checks, now, b);
    EXPECT_TRUE(sa.ok()) << sa.ToString();
    EXPECT_TRUE(sb.ok()) << sb.ToString();
    if (!sa.ok() || !sb.ok()) return false;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const bool same = a[i].allowed == b[i].allowed && a[i].remaining == b[i].remaining &&
                        a[i].reset_after == b[i].reset_after &&
                        a[i].retry_after == b[i].retry_after && a[i].limit == b[i].limit;
      if (!same) {
        ADD_FAILURE() << where << " check " << i << " " << Describe(*checks[i].policy)
                      << " key=" << checks[i].key << " cost=" << checks[i].cost << " now=" << now
                      << "\n  memory: allowed=" << a[i].allowed << " remaining=" << a[i].remaining
                      << " reset_after=" << a[i].reset_after << " retry_after=" << a[i].retry_after
                      << "\n  redis:  allowed=" << b[i].allowed << " remaining=" << b[i].remaining
                      << " reset_after=" << b[i].reset_after << " retry_after=" << b[i].retry_after;
        return false;
      }
    }
    return true;
  }

  std::shared_ptr<Store> redis_;
};

// Many policies and keys, multi-limit batches, time moving forward by random steps
// (zero, tiny, around the policies' periods, and long idle gaps).
TEST_F(Differential, MixedBatchesWithTimeMovingForward) {
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    MemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 8; ++i) policies.push_back(RandomPolicy(rng, i));
    const char* keys[] = {"alice", "bob", "{carol}"};
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 1500; ++step) {
      switch (rng() % 6) {
        case 0:
          break;
        case 1:
          now += static_cast<Micros>(rng() % 100);
          break;
        case 2:
        case 3: {
          const Policy& p = policies[rng() % policies.size()];
          now += static_cast<Micros>(rng() % (2 * p.window / p.limit + 1));
          break;
        }
        case 4:
          now += static_cast<Micros>(rng() % 5'000'000);
          break;
        default:
          if (rng() % 20 == 0) now += static_cast<Micros>(rng() % 7'200'000'000LL);
      }
      const std::size_t n = 1 + rng() % 4;
      std::string store_keys[4];
      StoreCheck checks[4];
      std::size_t used = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t pi = rng() % policies.size();
        const char* key = keys[rng() % std::size(keys)];
        auto k = StoreKey("diff" + std::to_string(seed), key, policies[pi].name);
        ASSERT_TRUE(k.ok());
        bool dup = false;
        for (std::size_t j = 0; j < used; ++j) dup = dup || store_keys[j] == *k;
        if (dup) continue;  // the Limiter never sends one key twice in a batch
        store_keys[used] = *k;
        checks[used] = StoreCheck{&policies[pi], store_keys[used], RandomCost(rng, policies[pi])};
        ++used;
      }
      if (!Compare(memory, std::span<const StoreCheck>(checks, used), now,
                   "seed " + std::to_string(seed) + " step " + std::to_string(step))) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 1500);
}

// One policy and key per sequence, with request times drawn at random inside a span,
// so time keeps jumping backwards (across window boundaries too). A store holding a
// single key never drops it while it is in use, so both stores keep the same state.
TEST_F(Differential, TimeJumpingBackAndForth) {
  int compared = 0;
  for (std::uint64_t seed = 100; seed < 160; ++seed) {
    std::mt19937_64 rng(seed);
    // MemoryStore never lets its own time go back (each shard decides at the latest
    // `now` it has seen), so with time jumping back the scripts are compared with the
    // plain reference model of the algorithms, which takes every `now` as given.
    ReferenceStore memory;
    const Policy p = RandomPolicy(rng, 0);
    const std::string key = *StoreKey("back" + std::to_string(seed), "k", p.name);
    const Micros start = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    const Micros span = 1 + static_cast<Micros>(rng() % (3 * static_cast<std::uint64_t>(p.window)));
    for (int step = 0; step < 150; ++step) {
      const Micros now = start + static_cast<Micros>(rng() % static_cast<std::uint64_t>(span));
      StoreCheck check{&p, key, RandomCost(rng, p)};
      if (!Compare(memory, std::span<const StoreCheck>(&check, 1), now,
                   "seed " + std::to_string(seed) + " step " + std::to_string(step))) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 60 * 150);
}

}  // namespace
}  // namespace sluice::testing
