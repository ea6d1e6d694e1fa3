// Differential test: the same random request sequences, with caller-supplied time,
// against MemoryStore and RedisStore (caller-time mode) must give identical
// decisions, field by field. This is what keeps the Lua scripts and src/core/*.cc
// in lockstep: any difference in arithmetic, rounding or state handling shows up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "edge_policies.h"
#include "previous_layouts.h"
#include "random_policy.h"
#include "reference_store.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/permit.h"
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

constexpr Micros kWindows[] = {1'000,     7'000,      250'000,      1'000'000,
                               3'300'000, 60'000'000, 3'600'000'000};
constexpr std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100, 1000};
Policy RandomPolicy(std::mt19937_64& rng, int index) {
  return testing::RandomPolicy(rng, index,
                               {.windows = kWindows, .limits = kLimits, .log_limit_cap = 100});
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

  // Runs `checks` under `op` on both stores; false (with a failure) on the first
  // difference.
  bool Compare(Store& memory, std::span<const StoreCheck> checks, Micros now,
               const std::string& where, StoreOp op = StoreOp::kDecide) {
    Decision a[kMaxBatchChecks], b[kMaxBatchChecks];
    Status sa = memory.Run({.op = op, .checks = checks, .now = now}, a);
    Status sb = redis_->Run({.op = op, .checks = checks, .now = now}, b);
    EXPECT_TRUE(sa.ok()) << sa.ToString();
    EXPECT_TRUE(sb.ok()) << sb.ToString();
    if (!sa.ok() || !sb.ok()) return false;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const bool same = a[i].allowed == b[i].allowed && a[i].remaining == b[i].remaining &&
                        a[i].reset_after == b[i].reset_after &&
                        a[i].retry_after == b[i].retry_after && a[i].limit == b[i].limit &&
                        a[i].charged == b[i].charged;
      if (!same) {
        ADD_FAILURE() << where << " check " << i << " " << Describe(*checks[i].policy)
                      << " key=" << checks[i].key << " cost=" << checks[i].cost << " now=" << now
                      << "\n  memory: allowed=" << a[i].allowed << " remaining=" << a[i].remaining
                      << " reset_after=" << a[i].reset_after << " retry_after=" << a[i].retry_after
                      << " charged=" << a[i].charged << "\n  redis:  allowed=" << b[i].allowed
                      << " remaining=" << b[i].remaining << " reset_after=" << b[i].reset_after
                      << " retry_after=" << b[i].retry_after << " charged=" << b[i].charged;
        return false;
      }
    }
    return true;
  }

  // Refunds `checks` on both stores, then compares a peek of each key (the state the
  // refund left) on both; false (with a failure) on the first difference.
  bool CompareRefund(Store& memory, std::span<const StoreCheck> checks, Micros now,
                     const std::string& where) {
    Status sa = memory.Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
    Status sb = redis_->Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
    EXPECT_TRUE(sa.ok()) << where << " " << sa.ToString();
    EXPECT_TRUE(sb.ok()) << where << " " << sb.ToString();
    if (!sa.ok() || !sb.ok()) return false;
    StoreCheck peeks[kMaxBatchChecks];
    for (std::size_t i = 0; i < checks.size(); ++i) {
      peeks[i] = checks[i];
      peeks[i].cost = 0;
    }
    return Compare(memory, std::span<const StoreCheck>(peeks, checks.size()), now,
                   where + " (peek after a refund)");
  }

  std::shared_ptr<Store> redis_;
};

// Many policies and keys, multi-limit batches, time moving forward by random steps
// (zero, tiny, around the policies' periods, and long idle gaps).
TEST_F(Differential, MixedBatchesWithTimeMovingForward) {
  int compared = 0;
  int refunds = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;  // on a cluster: split by slot (store_backends.h)
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
        checks[used] = StoreCheck{.policy = &policies[pi],
                                  .key = store_keys[used],
                                  .cost = RandomCost(rng, policies[pi])};
        ++used;
      }
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      if (rng() % 5 == 0) {
        // A refund of the same checks (what a caller gives back after a failure, or
        // the undo of a cross-slot reservation), with costs of 1..capacity.
        for (std::size_t i = 0; i < used; ++i) {
          checks[i].cost = std::max<std::uint64_t>(1, RandomCost(rng, *checks[i].policy));
        }
        if (!CompareRefund(memory, std::span<const StoreCheck>(checks, used), now, where)) return;
        ++refunds;
      } else if (!Compare(memory, std::span<const StoreCheck>(checks, used), now, where)) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 1500);
  EXPECT_GT(refunds, 6 * 1500 / 10);
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
      StoreCheck check{.policy = &p, .key = key, .cost = RandomCost(rng, p)};
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      if (rng() % 6 == 0) {
        check.cost = std::max<std::uint64_t>(1, check.cost);
        if (!CompareRefund(memory, std::span<const StoreCheck>(&check, 1), now, where)) return;
      } else if (!Compare(memory, std::span<const StoreCheck>(&check, 1), now, where)) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 60 * 150);
}

bool SameDecision(const Decision& a, const Decision& b) {
  return a.allowed == b.allowed && a.remaining == b.remaining && a.reset_after == b.reset_after &&
         a.retry_after == b.retry_after && a.limit == b.limit && a.charged == b.charged;
}

// Deletes every key of `keys` whose state says it has expired by `now`: Redis's expiry
// at the earliest moment it may happen (caller-time mode pads TTLs, so Redis itself
// would not drop them). Word states: one byte of algorithm, then `expires` as a
// little-endian double; the sliding log's: "1 <expires> ...".
void DropExpired(RedisServer& server, const std::vector<std::string>& keys, Micros now) {
  for (const std::string& key : keys) {
    auto raw = server.Command({"GET", key});
    ASSERT_TRUE(raw.ok());
    const std::string& v = raw->str;
    if (v.empty()) continue;
    double expires = 0;
    if (v.size() >= 9 && v[0] >= 0 && v[0] <= 4) {
      std::memcpy(&expires, v.data() + 1, sizeof(double));
    } else if (v.starts_with("1 ")) {
      expires = std::stod(v.substr(2));
    } else if (v.find_first_not_of("0123456789.-+e") == std::string::npos) {
      expires = std::ceil(std::stod(v));  // GCRA: the TAT as a number (lua/gcra.lua)
    } else {
      ADD_FAILURE() << "unknown state layout in " << key;
      continue;
    }
    if (expires <= static_cast<double>(now)) {
      ASSERT_TRUE(server.Command({"DEL", key, key + ":log"}).ok());
    }
  }
}

// Issue #11, item 1: expiry never changes a decision. Three stores see the same
// requests: a reference that keeps every state forever and decides from it however old
// (src/core on the stored state), MemoryStore (which treats a state past its expiry as
// fresh and sweeps it), and Redis with every expired key deleted as soon as it may be.
// Token buckets with initial_tokens below their capacity are the case that used to
// differ (a refilled, dropped bucket restarted at initial_tokens).
TEST_F(Differential, DroppedStatesDecideLikeKeptOnes) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  int compared = 0;
  for (std::uint64_t seed = 300; seed < 306; ++seed) {
    std::mt19937_64 rng(seed);
    ReferenceStore kept(/*drop_expired=*/false);
    MemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 6; ++i) {
      Policy p = RandomPolicy(rng, i);
      if (i < 3) {  // half of them: token buckets that start below full
        p.algorithm = Algorithm::kTokenBucket;
        p.limit = std::max<std::uint64_t>(p.limit, 2);
        p.window = std::min<Micros>(p.window, 60'000'000);
        p.burst = rng() % 2 ? 0 : p.limit + rng() % (p.limit + 1);
        p.initial_tokens = rng() % p.Capacity();
      }
      policies.push_back(p);
    }
    std::vector<std::string> all_keys;
    const char* names[] = {"a", "b"};
    for (const char* n : names) {
      for (const Policy& p : policies) {
        all_keys.push_back(*StoreKey("drop" + std::to_string(seed), n, p.name));
      }
    }
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 600; ++step) {
      const Policy& tp = policies[rng() % policies.size()];
      switch (rng() % 4) {
        case 0:
          now += static_cast<Micros>(rng() % (tp.window / tp.limit + 1));
          break;
        case 1:  // around "full" and "full for a whole window"
          now += static_cast<Micros>(rng() % (3 * static_cast<std::uint64_t>(tp.window)));
          break;
        default:
          break;
      }
      const std::size_t n = 1 + rng() % 3;
      StoreCheck checks[3];
      std::size_t used = 0;
      [[maybe_unused]] std::size_t first_caller = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t pi = rng() % policies.size();
        std::size_t caller = rng() % 2;
#ifdef SLUICE_TESTS_ON_CLUSTER
        // One caller key (one hash slot) per batch: a batch across slots is a
        // reservation undone by refunds (docs/redis.md, "Several limits in one request"),
        // which is not what this test compares.
        if (i == 0) first_caller = caller;
        caller = first_caller;
#endif
        const std::string& key = all_keys[caller * policies.size() + pi];
        bool dup = false;
        for (std::size_t j = 0; j < used; ++j) dup = dup || checks[j].key == key;
        if (dup) continue;
        checks[used++] =
            StoreCheck{.policy = &policies[pi], .key = key, .cost = RandomCost(rng, policies[pi])};
      }
      const std::span<const StoreCheck> batch(checks, used);
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      Decision k[3], m[3], r[3];
      ASSERT_TRUE(kept.Run({.checks = batch, .now = now}, k).ok());
      ASSERT_TRUE(memory.Run({.checks = batch, .now = now}, m).ok());
      ASSERT_TRUE(redis_->Run({.checks = batch, .now = now}, r).ok());
      for (std::size_t i = 0; i < used; ++i) {
        ASSERT_TRUE(SameDecision(k[i], m[i]) && SameDecision(k[i], r[i]))
            << where << " check " << i << " " << Describe(*checks[i].policy)
            << " cost=" << checks[i].cost << "\n  kept:   allowed=" << k[i].allowed
            << " remaining=" << k[i].remaining << " reset_after=" << k[i].reset_after
            << " retry_after=" << k[i].retry_after << "\n  memory: allowed=" << m[i].allowed
            << " remaining=" << m[i].remaining << " reset_after=" << m[i].reset_after
            << " retry_after=" << m[i].retry_after << "\n  redis:  allowed=" << r[i].allowed
            << " remaining=" << r[i].remaining << " reset_after=" << r[i].reset_after
            << " retry_after=" << r[i].retry_after;
      }
      DropExpired(*server, all_keys, now);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 600);
}

// A store on the shared test server (flushed) in caller-time mode, for the RedisLayout
// tests; null (and a failure) if it cannot be made.
std::shared_ptr<RedisStore> LayoutStore(RedisServer& server) {
  EXPECT_TRUE(server.Command({"FLUSHALL"}).ok());
  RedisStoreOptions o;
  o.url = server.Url();
  o.call_timeout = kPatientCallTimeout;
  o.use_caller_time = true;
  o.on_warning = [](std::string_view) {};
  auto redis = RedisStore::Create(std::move(o));
  EXPECT_TRUE(redis.ok()) << redis.status().ToString();
  return redis.ok() ? *redis : nullptr;
}

// A rolling upgrade (issue #9 item 1): GCRA's state was struct.pack('<Bdd', 4, expires,
// tat) and is now the TAT as a plain number. At random steps the key is rewritten in
// the previous layout (what a server of the previous version would have left, with
// the same TTL); decisions, peeks and refunds must still equal MemoryStore's, for the
// one-check script, the lean GCRA script (a batch of two GCRA checks) and the batch
// script alike.
TEST(RedisLayout, GcraPreviousLayoutIsReadExactly) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<RedisStore> redis = LayoutStore(*server);
  ASSERT_NE(redis, nullptr);
  MemoryStore memory;
  const Policy gcra = Policy::Gcra("g", 5, std::chrono::seconds(1), 7);
  const Policy other = Policy::FixedWindow("f", 1000, std::chrono::seconds(1));
  const Policy gcra2 = Policy::Gcra("g2", 1000, std::chrono::seconds(1), 1000);
  const std::string key = "sluice:{up}:g", key2 = "sluice:{up}:f", key3 = "sluice:{up}:g2";
  std::mt19937_64 rng(9);
  Micros now = kNoon;
  int old_layout_reads = 0;
  for (int step = 0; step < 400; ++step) {
    now += static_cast<Micros>(rng() % 400'000);
    if (rng() % 2 == 0) old_layout_reads += DowngradeGcra(*server, key);
    const std::uint64_t cost = rng() % 4;  // 0: a peek
    // One check, or a batch with a fixed window (the batch script) or with another GCRA
    // check (the lean GCRA script, lua/lean_gcra.lua).
    const bool mixed = rng() % 2 == 0;
    StoreCheck checks[2] = {
        {.policy = &gcra, .key = key, .cost = cost},
        {.policy = mixed ? &other : &gcra2, .key = mixed ? key2 : key3, .cost = 1}};
    const std::size_t n = rng() % 3 == 0 ? 2 : 1;
    const std::string where = "step " + std::to_string(step);
    if (cost > 0 && rng() % 5 == 0) {
      ASSERT_TRUE(memory
                      .Run({.op = StoreOp::kRefund,
                            .checks = std::span<const StoreCheck>(checks, 1),
                            .now = now},
                           {})
                      .ok());
      ASSERT_TRUE(redis
                      ->Run({.op = StoreOp::kRefund,
                             .checks = std::span<const StoreCheck>(checks, 1),
                             .now = now},
                            {})
                      .ok())
          << where;
      continue;
    }
    Decision a[2], b[2];
    ASSERT_TRUE(memory.Run({.checks = std::span<const StoreCheck>(checks, n), .now = now}, a).ok());
    ASSERT_TRUE(redis->Run({.checks = std::span<const StoreCheck>(checks, n), .now = now}, b).ok())
        << where;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i].allowed, b[i].allowed) << where << " check " << i;
      ASSERT_EQ(a[i].remaining, b[i].remaining) << where << " check " << i;
      ASSERT_EQ(a[i].reset_after, b[i].reset_after) << where << " check " << i;
      ASSERT_EQ(a[i].retry_after, b[i].retry_after) << where << " check " << i;
    }
  }
  EXPECT_GT(old_layout_reads, 100);  // the previous layout was really read, many times
}

// A rolling upgrade (issue #18): a fixed window's state was struct.pack('<Bddd', 0,
// expires, window_start, count) and is now a counter (lua/fixed_window.lua). At random
// steps the key is rewritten in the previous layout (what a server of the previous
// version would have left, with the same TTL); decisions, peeks and refunds must still
// equal MemoryStore's, for the lean fixed-window script (one check, or a batch of two
// fixed windows) and the batch script alike.
TEST(RedisLayout, FixedWindowPreviousLayoutIsReadExactly) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<RedisStore> redis = LayoutStore(*server);
  ASSERT_NE(redis, nullptr);
  MemoryStore memory;
  const Policy fw = Policy::FixedWindow("f", 5, std::chrono::seconds(1));
  const Policy other = Policy::Gcra("g", 1000, std::chrono::seconds(1), 1000);
  const Policy fw2 = Policy::FixedWindow("f2", 1000, std::chrono::seconds(1));
  const std::string key = "sluice:{upfw}:f", key2 = "sluice:{upfw}:g", key3 = "sluice:{upfw}:f2";
  std::mt19937_64 rng(11);
  Micros now = kNoon;
  int old_layout_reads = 0, decided_on_old = 0;
  for (int step = 0; step < 600; ++step) {
    now += static_cast<Micros>(rng() % 300'000);
    if (rng() % 2 == 0) {
      // the counter of the current window becomes the previous layout, with its TTL
      old_layout_reads += DowngradeFixedWindow(*server, key, now - now % fw.window, fw.window);
    }
    auto len = server->Command({"STRLEN", key});
    ASSERT_TRUE(len.ok());
    decided_on_old += len->integer == 25 ? 1 : 0;
    const std::uint64_t cost = rng() % 4;  // 0: a peek
    // One check, or a batch with a GCRA check (the batch script) or with another fixed
    // window (the lean fixed-window script, lua/lean_fixed_window.lua).
    const bool mixed = rng() % 2 == 0;
    StoreCheck checks[2] = {
        {.policy = &fw, .key = key, .cost = cost},
        {.policy = mixed ? &other : &fw2, .key = mixed ? key2 : key3, .cost = 1}};
    const std::size_t n = rng() % 3 == 0 ? 2 : 1;
    const std::string where = "step " + std::to_string(step);
    if (cost > 0 && rng() % 5 == 0) {
      ASSERT_TRUE(memory
                      .Run({.op = StoreOp::kRefund,
                            .checks = std::span<const StoreCheck>(checks, 1),
                            .now = now},
                           {})
                      .ok());
      ASSERT_TRUE(redis
                      ->Run({.op = StoreOp::kRefund,
                             .checks = std::span<const StoreCheck>(checks, 1),
                             .now = now},
                            {})
                      .ok())
          << where;
      continue;
    }
    Decision a[2], b[2];
    ASSERT_TRUE(memory.Run({.checks = std::span<const StoreCheck>(checks, n), .now = now}, a).ok());
    ASSERT_TRUE(redis->Run({.checks = std::span<const StoreCheck>(checks, n), .now = now}, b).ok())
        << where;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i].allowed, b[i].allowed) << where << " check " << i;
      ASSERT_EQ(a[i].remaining, b[i].remaining) << where << " check " << i;
      ASSERT_EQ(a[i].reset_after, b[i].reset_after) << where << " check " << i;
      ASSERT_EQ(a[i].retry_after, b[i].retry_after) << where << " check " << i;
    }
    auto ttl = server->Command({"PTTL", key});
    ASSERT_TRUE(ttl.ok());
    EXPECT_NE(ttl->integer, -1) << where << ": a key without a TTL";
  }
  // The previous layout was really read, many times (a key keeps it until its window ends).
  EXPECT_GT(old_layout_reads, 50);
  EXPECT_GT(decided_on_old, 200);
}

// A fixed window's counter names its window with a 20-bit tag (lua/fixed_window.lua). In
// caller-time mode every TTL is padded by an hour, so a 1 ms window's key outlives 2^20
// windows: its stale count must not be read as the count of the window 2^20 later.
TEST(RedisLayout, AStaleCounterIsNotReadAsTheWindowItsTagAliases) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<RedisStore> redis = LayoutStore(*server);
  ASSERT_NE(redis, nullptr);
  const Policy fw = Policy::FixedWindow("ms", 3, std::chrono::milliseconds(1));
  const std::string key = "sluice:{alias}:ms";
  const StoreCheck c{.policy = &fw, .key = key, .cost = 3};
  Decision d;
  ASSERT_TRUE(redis->Run({.checks = {&c, 1}, .now = kNoon}, {&d, 1}).ok());
  ASSERT_TRUE(d.allowed);
  // 2^20 windows later (about 17.5 minutes, within the padded TTL)
  ASSERT_TRUE(
      redis->Run({.checks = {&c, 1}, .now = kNoon + (Micros{1} << 20) * 1000}, {&d, 1}).ok());
  EXPECT_TRUE(d.allowed) << "a fresh window, not the stale count";
  EXPECT_EQ(d.remaining, 0u);
}

// The lean fixed-window script (lua/lean_fixed_window.lua) spends one command on a fresh
// window: while the call's checks find no key, it writes the counter whole with `SET ...
// PX ... NX`; once they find live windows, one `INCRBY` each (the first to find one pays
// its refused SET too). Every key keeps its TTL and its count.
TEST(RedisLayout, LeanFixedWindowWritesAFreshWindowWithOneCommand) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<RedisStore> redis = LayoutStore(*server);
  ASSERT_NE(redis, nullptr);
  ASSERT_TRUE(server->Command({"CONFIG", "RESETSTAT"}).ok());
  const Policy fw = Policy::FixedWindow("fw", 5, std::chrono::hours(1));
  constexpr std::size_t kChecks = 8;
  std::vector<std::string> keys;
  std::vector<StoreCheck> checks;
  for (std::size_t i = 0; i < kChecks; ++i) keys.push_back("sluice:{fresh}:" + std::to_string(i));
  for (const std::string& k : keys) checks.push_back({.policy = &fw, .key = k, .cost = 1});
  Decision d[kChecks];
  ASSERT_TRUE(redis->Run({.checks = checks, .now = kNoon}, d).ok());
  for (std::size_t i = 0; i < kChecks; ++i) {
    EXPECT_TRUE(d[i].allowed) << i;
    EXPECT_EQ(d[i].remaining, 4u) << i;
  }
  EXPECT_EQ(server->CommandCalls("set"), static_cast<long long>(kChecks));
  EXPECT_EQ(server->CommandCalls("incrby"), 0);
  // The same keys again, live: one refused SET, then an INCRBY each.
  ASSERT_TRUE(redis->Run({.checks = checks, .now = kNoon + 1}, d).ok());
  for (std::size_t i = 0; i < kChecks; ++i) {
    EXPECT_TRUE(d[i].allowed) << i;
    EXPECT_EQ(d[i].remaining, 3u) << i;
  }
  EXPECT_EQ(server->CommandCalls("set"), static_cast<long long>(kChecks) + 1);
  EXPECT_EQ(server->CommandCalls("incrby"), static_cast<long long>(kChecks));
  for (const std::string& k : keys) {
    auto ttl = server->Command({"PTTL", k});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k;
    auto v = server->Command({"GET", k});
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(std::stoll(v->str) % (1LL << 32), 2) << k << ": the count of this window";
  }
}

// A fixed window decides with ONE INCRBY on its counter (lua/fixed_window.lua), a sliding
// counter that goes on in its window writes only its count (SETRANGE), alone or in a
// batch; each key keeps its TTL and its layout, and the count is really stored (the
// limit is enforced).
TEST(RedisLayout, SameWindowWritesTouchOnlyTheCountAndKeepTheTtl) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  const std::shared_ptr<RedisStore> redis = LayoutStore(*server);
  ASSERT_NE(redis, nullptr);
  ASSERT_TRUE(server->Command({"CONFIG", "RESETSTAT"}).ok());
  const Policy fw = Policy::FixedWindow("fw", 3, std::chrono::hours(1));
  const Policy swc = Policy::SlidingWindowCounter("swc", 3, std::chrono::hours(1));
  // Each step: one fixed-window check alone, and a batch of two sliding-counter checks.
  const std::string kf = "sluice:{patch}:fw", ks[2] = {"sluice:{patch}:s0", "sluice:{patch}:s1"};
  for (int i = 0; i < 4; ++i) {
    const StoreCheck f{.policy = &fw, .key = kf, .cost = 1};
    const StoreCheck s[2] = {{.policy = &swc, .key = ks[0], .cost = 1},
                             {.policy = &swc, .key = ks[1], .cost = 1}};
    Decision df, ds[2];
    ASSERT_TRUE(redis->Run({.checks = {&f, 1}, .now = kNoon + i}, {&df, 1}).ok());
    ASSERT_TRUE(redis->Run({.checks = s, .now = kNoon + i}, ds).ok());
    // (the counter: tag * 2^32 + count, 16 decimal digits; the sliding counter: 33 bytes)
    for (const auto& [d, key, size] :
         {std::tuple{df, kf, 16}, std::tuple{ds[0], ks[0], 33}, std::tuple{ds[1], ks[1], 33}}) {
      EXPECT_EQ(d.allowed, i < 3) << key << " " << i;
      EXPECT_EQ(d.remaining, i < 3 ? 2u - i : 0u) << key << " " << i;
      auto ttl = server->Command({"PTTL", key});
      ASSERT_TRUE(ttl.ok());
      EXPECT_GT(ttl->integer, 0) << key << " " << i;
      auto len = server->Command({"STRLEN", key});
      ASSERT_TRUE(len.ok());
      EXPECT_EQ(len->integer, size) << key << " " << i;
    }
  }
  // The sliding counters: two patches each (the second and third requests; the first
  // SETs, the fourth is denied). The fixed window: an INCRBY each, and one more to give
  // the denied fourth's cost back; a SET only for the first (the fresh window).
  EXPECT_EQ(server->CommandCalls("setrange"), 4);
  EXPECT_EQ(server->CommandCalls("incrby"), 5);
  EXPECT_EQ(server->CommandCalls("set"), 3);
  EXPECT_EQ(server->CommandCalls("get"), 8);
  // A sliding counter's check alone (its one-check script) likewise: a SET for the first,
  // patches for the second and third, nothing for the denied fourth.
  const std::string k1 = "sluice:{patch}:alone";
  const StoreCheck one{.policy = &swc, .key = k1, .cost = 1};
  const long long set0 = server->CommandCalls("set"), range0 = server->CommandCalls("setrange");
  for (int i = 0; i < 4; ++i) {
    Decision d;
    ASSERT_TRUE(redis->Run({.checks = {&one, 1}, .now = kNoon + i}, {&d, 1}).ok());
    EXPECT_EQ(d.allowed, i < 3) << i;
    EXPECT_EQ(d.remaining, i < 3 ? 2u - i : 0u) << i;
  }
  EXPECT_EQ(server->CommandCalls("set") - set0, 1);
  EXPECT_EQ(server->CommandCalls("setrange") - range0, 2);
}

// Refunds on Redis's own clock (the production mode), through the Limiter: every
// algorithm gives the unit back, a multi-key refund is one atomic call, keys keep a
// TTL, and bad costs are rejected before anything is sent.
TEST(RedisRefund, LimiterRefundOnRedisClock) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  RedisStoreOptions o;
  o.url = server->Url();
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto hour = std::chrono::hours(1);
  LimiterOptions lo;
  lo.policies = {Policy::FixedWindow("fw", 3, hour), Policy::SlidingWindowLog("log", 3, hour),
                 Policy::SlidingWindowCounter("swc", 3, hour),
                 Policy::TokenBucket("tb", 3, 3, hour), Policy::Gcra("gcra", 3, hour, 3)};
  lo.store = *store;
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  Limiter& l = **limiter;
  // Each policy on a key of its own, so that each one's refund is seen alone.
  for (std::size_t i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    const Check take{i, key, 3};
    ASSERT_TRUE(l.Acquire(std::span<const Check>(&take, 1))->allowed) << i;
    const Check one{i, key, 1};
    ASSERT_FALSE(l.Acquire(std::span<const Check>(&one, 1))->allowed) << i;
    ASSERT_TRUE(l.Refund(std::span<const Check>(&one, 1)).ok()) << i;
    EXPECT_TRUE(l.Acquire(std::span<const Check>(&one, 1))->allowed) << i;
    EXPECT_FALSE(l.Acquire(std::span<const Check>(&one, 1))->allowed) << i;
  }
  // All five at once, on one key: all given back in one call.
  EXPECT_EQ(l.Acquire("multi", 3)->remaining, 0u);
  ASSERT_TRUE(l.Refund("multi", 2).ok());
  Decision per[5];
  ASSERT_TRUE(l.Peek("multi", per).ok());
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(per[i].remaining, 2u) << i;
  EXPECT_EQ(l.Refund("multi", 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(l.Refund("multi", 4).code(), ErrorCode::kInvalidArgument);
  const Policy& fw = l.policies()[0];
  const StoreCheck zero{.policy = &fw, .key = "sluice:{multi}:fw", .cost = 0};
  EXPECT_EQ(
      (*store)
          ->Run({.op = StoreOp::kRefund, .checks = std::span<const StoreCheck>(&zero, 1), .now = 0},
                {})
          .code(),
      ErrorCode::kInvalidArgument);
  auto keys = server->Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  ASSERT_FALSE(keys->elements.empty());
  for (const auto& k : keys->elements) {
    auto ttl = server->Command({"PTTL", k.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k.str;
  }
}

// A store whose asynchronous calls complete inline (the defaults of sluice::Store), so
// that a lease given back (a RunAsync refund) lands before the next request: the sequence
// is then the same on both stores. Not remote: no deny cache on either side.
class InlineStore final : public Store {
 public:
  explicit InlineStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    return inner_->Run(batch, out);
  }
  Status Refund(std::span<const StoreCheck> checks, Micros now) {
    return inner_->Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
  }
  Status Reset(const Policy& p, std::string_view key) override { return inner_->Reset(p, key); }

 private:
  std::shared_ptr<Store> inner_;
};

// Leases (Policy::lease): a Limiter with leases over each store, fed the same random
// requests on one ManualClock, must decide identically, field by field and source
// included: lease grants are decisions of cost N, returns are refunds of the unused
// units (on expiry, at a too-large cost, when a limiter ends), and the state both
// stores are left with must match too.
TEST_F(Differential, LeaseGrantsAndReturns) {
  int compared = 0, leased = 0;
  for (std::uint64_t seed = 300; seed < 312; ++seed) {
    std::mt19937_64 rng(seed);
    Policy p = RandomPolicy(rng, 0);
    if (p.algorithm == Algorithm::kSlidingWindowLog) p.algorithm = Algorithm::kFixedWindow;
    if (p.Capacity() < 4) {  // room for leases larger than a request
      p.limit = 100;
      p.burst = 0;
    }
    p.lease = 2 + rng() % (p.Capacity() - 1);
    if (rng() % 2) p.lease_validity = 1 + static_cast<Micros>(rng() % (p.window / 10));
    ASSERT_TRUE(ValidatePolicy(p).ok()) << Describe(p);
    const Micros validity = p.lease_validity > 0 ? p.lease_validity : p.window / 10;
    auto memory = std::make_shared<MemoryStore>();
    auto remote = std::make_shared<InlineStore>(redis_);
    auto clock = std::make_shared<ManualClock>(kNoon + static_cast<Micros>(rng() % 1'000'000'000));
    const std::string prefix = "lease" + std::to_string(seed);
    auto make = [&](std::shared_ptr<Store> store) {
      LimiterOptions o;
      o.policies = {p};
      o.store = std::move(store);
      o.clock = clock;
      o.key_prefix = prefix;
      return std::move(Limiter::Create(std::move(o))).value();
    };
    std::unique_ptr<Limiter> a = make(memory), b = make(remote);
    const char* keys[] = {"hot", "warm"};
    for (int step = 0; step < 400; ++step) {
      switch (rng() % 8) {
        case 0:
        case 1:
        case 2:
          break;  // same instant: leases are used
        case 3:
          clock->Advance(static_cast<Micros>(rng() % 50));
          break;
        case 4:
          clock->Advance(static_cast<Micros>(rng() % (validity + 1)));  // around expiry
          break;
        case 5:
          clock->Advance(static_cast<Micros>(rng() % (p.window + 1)));
          break;
        default:
          clock->Advance(static_cast<Micros>(rng() % (validity / 4 + 1)));
      }
      const char* key = keys[rng() % 2];
      const std::string where = Describe(p) + " lease=" + std::to_string(p.lease) +
                                " validity=" + std::to_string(p.lease_validity) + " seed " +
                                std::to_string(seed) + " step " + std::to_string(step);
      const unsigned op = rng() % 40;
      if (op == 0) {
        a.reset();  // each gives its leases back
        b.reset();
        a = make(memory);
        b = make(remote);
        continue;
      }
      if (op == 1) {
        const std::uint64_t cost = 1 + rng() % p.Capacity();
        Status sa = a->Refund(key, cost);
        Status sb = b->Refund(key, cost);
        ASSERT_TRUE(sa.ok() && sb.ok()) << where << sa.ToString() << sb.ToString();
        continue;
      }
      const std::uint64_t cost = rng() % 6 == 0 ? 1 + rng() % p.Capacity() : 1;
      auto da = a->Acquire(key, cost);
      auto db = b->Acquire(key, cost);
      ASSERT_TRUE(da.ok() && db.ok()) << where;
      const bool same = da->allowed == db->allowed && da->remaining == db->remaining &&
                        da->reset_after == db->reset_after && da->retry_after == db->retry_after &&
                        da->limit == db->limit && da->source == db->source;
      ASSERT_TRUE(same) << where << " key=" << key << " cost=" << cost << " now=" << clock->Now()
                        << "\n  memory: allowed=" << da->allowed << " remaining=" << da->remaining
                        << " reset_after=" << da->reset_after << " retry_after=" << da->retry_after
                        << " source=" << DecisionSourceName(da->source)
                        << "\n  redis:  allowed=" << db->allowed << " remaining=" << db->remaining
                        << " reset_after=" << db->reset_after << " retry_after=" << db->retry_after
                        << " source=" << DecisionSourceName(db->source);
      leased += da->source == DecisionSource::kLease ? 1 : 0;
      ++compared;
    }
    // Both limiters end (their leases go back); both stores must hold the same state.
    const auto sa = a->Stats(), sb = b->Stats();
    EXPECT_EQ(sa.lease_grants, sb.lease_grants);
    a.reset();
    b.reset();
    for (const char* key : keys) {
      const std::string k = *StoreKey(prefix, key, p.name);
      const StoreCheck peek{.policy = &p, .key = k, .cost = 0};
      if (!Compare(*memory, std::span<const StoreCheck>(&peek, 1), clock->Now(),
                   "final state seed " + std::to_string(seed))) {
        return;
      }
    }
  }
  EXPECT_GT(compared, 12 * 300);
  EXPECT_GT(leased, compared / 4) << "too few decisions came from a lease to mean much";
}

// --- concurrency limits (issue #12 item 1) ---
// Random acquire / release / extend / peek sequences on a few keys, with time moving
// forward (by nothing, a little, around the leases, and past them), two concurrency
// policies mixed with rate policies in one batch: both stores must decide
// identically, field by field (releases and extends say whether the permit was held).
TEST_F(Differential, PermitsAcquireReleaseExtendAndExpire) {
  int compared = 0, acquires = 0, releases = 0;
  for (std::uint64_t seed = 500; seed < 506; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    static const Micros kLeases[] = {1'000, 7'000, 250'000, 1'000'000, 3'300'000};
    std::vector<Policy> policies;
    for (int i = 0; i < 2; ++i) {
      policies.push_back(Policy::Concurrency("c" + std::to_string(i), 1 + rng() % 5,
                                             std::chrono::microseconds(kLeases[rng() % 5])));
    }
    for (int i = 0; i < 2; ++i) policies.push_back(RandomPolicy(rng, i));
    const char* names[] = {"alice", "bob"};
    std::vector<std::string> ids[2];  // permits acquired per key (maybe released or expired)
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 800; ++step) {
      const Policy& tp = policies[rng() % 2];
      switch (rng() % 6) {
        case 0:
        case 1:
          break;
        case 2:
          now += static_cast<Micros>(rng() % 100);
          break;
        case 3:
          now += static_cast<Micros>(rng() % (tp.window / tp.limit + 1));
          break;
        case 4:
          now += static_cast<Micros>(rng() % (2 * tp.window + 1));
          break;
        default:
          now += static_cast<Micros>(rng() % 10'000);
      }
      const std::size_t who = rng() % 2;
      std::string keys[4];
      StoreCheck checks[4];
      std::size_t used = 0;
      const unsigned op = rng() % 10;
      std::string id;
      StoreOp batch_op = StoreOp::kDecide;
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      if (op < 5) {  // acquire under one or both concurrency policies, maybe with rates
        id = RandomId(rng);
        for (std::size_t pi = 0; pi < policies.size(); ++pi) {
          if (pi == 1 && rng() % 2) continue;
          if (pi >= 2 && rng() % 2) continue;
          keys[used] = *StoreKey("permits" + std::to_string(seed), names[who], policies[pi].name);
          const bool conc = policies[pi].algorithm == Algorithm::kConcurrency;
          checks[used] = StoreCheck{
              .policy = &policies[pi],
              .key = keys[used],
              .cost = conc ? 1 : std::max<std::uint64_t>(1, RandomCost(rng, policies[pi]))};
          if (conc) checks[used].permit = id;
          ++used;
        }
      } else {
        // release / extend (an id acquired before, or one never seen) or a peek
        batch_op = op == 9 ? StoreOp::kDecide : op < 7 ? StoreOp::kRelease : StoreOp::kExtend;
        if (!ids[who].empty() && rng() % 5 != 0) {
          id = ids[who][rng() % ids[who].size()];
        } else {
          id = RandomId(rng);
        }
        for (std::size_t pi = 0; pi < 2; ++pi) {
          keys[used] = *StoreKey("permits" + std::to_string(seed), names[who], policies[pi].name);
          checks[used] = StoreCheck{.policy = &policies[pi], .key = keys[used], .cost = 1};
          if (op == 9) {
            checks[used].cost = 0;  // a peek
          } else {
            checks[used].permit = id;
          }
          ++used;
        }
      }
      if (!Compare(memory, std::span<const StoreCheck>(checks, used), now, where, batch_op)) return;
      ++compared;
      // Acquired ids are kept whether allowed or not: a denied one is an unknown permit.
      if (op < 5) {
        ids[who].push_back(id);
        ++acquires;
      } else if (op < 7) {
        ++releases;
      }
      if (ids[who].size() > 32) ids[who].erase(ids[who].begin());
    }
  }
  EXPECT_EQ(compared, 6 * 800);
  EXPECT_GT(acquires, 6 * 800 / 3);
  EXPECT_GT(releases, 6 * 800 / 10);
}

// Every rate algorithm at the edges of what ValidatePolicy accepts (the smallest and
// largest limit, window, burst and debt, each overage mode), every operation and cost
// up to the most a check may ask, time forward by a microsecond and by years (tests/
// support/edge_policies.h): the scripts decide as the in-process store (the module's
// twin: ModuleDifferential.EdgePoliciesMatchLua).
TEST_F(Differential, EdgePoliciesEveryOperation) {
  const std::vector<Policy> policies = edge::Policies();
  int compared = 0;
  for (std::size_t pi = 0; pi < policies.size(); ++pi) {
    // (a store per policy: each policy's sequence starts its time over, and MemoryStore
    // decides at the latest now it has seen)
    DifferentialMemoryStore memory;
    const Policy& p = policies[pi];
    // (a key whose companions, a log's ":log", share its cluster slot)
    const std::string key = *StoreKey("edge" + std::to_string(pi), "k", p.name);
    for (const edge::Step& step : edge::Steps(p, /*back=*/false)) {
      const StoreCheck c{.policy = &p, .key = key, .cost = step.cost, .max_wait = step.max_wait};
      const std::string where =
          "policy " + std::to_string(pi) + " " + edge::Describe(p) + " " + step.Describe();
      const bool same = step.op == StoreOp::kRefund
                            ? CompareRefund(memory, {&c, 1}, step.now, where)
                            : Compare(memory, {&c, 1}, step.now, where, step.op);
      ASSERT_TRUE(same);
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
}

// Penalties and blocks (issue #12 item 3): policies with and without block_for, on one
// caller key per batch (as the Limiter sends them: one hash tag), with plain checks,
// peeks, penalties (forced checks), rewards (refunds) and resets at random, time moving
// forward in steps around the windows and the blocks. Every decision, field by field,
// and the state left (a peek after each penalty, reward and reset) must be the same.
TEST_F(Differential, BlocksPenaltiesAndRewards) {
  int compared = 0, penalties = 0, blocked = 0;
  for (std::uint64_t seed = 500; seed < 506; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 6; ++i) {
      Policy p = RandomPolicy(rng, i);
      p.window = std::min<Micros>(p.window, 60'000'000);
      if (i % 3 != 2) p.block_for = 1 + static_cast<Micros>(rng() % (3 * p.window));
      ASSERT_TRUE(ValidatePolicy(p).ok()) << Describe(p);
      policies.push_back(p);
    }
    const char* callers[] = {"mallory", "trent"};
    const std::string prefix = "pen" + std::to_string(seed);
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 700; ++step) {
      const Policy& tp = policies[rng() % policies.size()];
      switch (rng() % 5) {
        case 0:
          break;
        case 1:
          now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
          break;
        case 2:
          now += static_cast<Micros>(rng() % (tp.block_for + tp.window + 1));
          break;
        default:
          now += static_cast<Micros>(rng() % 1000);
      }
      const char* caller = callers[rng() % 2];
      // 1-3 distinct policies of this caller key.
      std::string keys[3];
      StoreCheck checks[3];
      std::size_t used = 0;
      for (std::size_t i = 0, n = 1 + rng() % 3; i < n; ++i) {
        const std::size_t pi = rng() % policies.size();
        const std::string k = *StoreKey(prefix, caller, policies[pi].name);
        bool dup = false;
        for (std::size_t j = 0; j < used; ++j) dup = dup || keys[j] == k;
        if (dup) continue;
        keys[used] = k;
        checks[used] = StoreCheck{
            .policy = &policies[pi], .key = keys[used], .cost = RandomCost(rng, policies[pi])};
        ++used;
      }
      const std::span<const StoreCheck> batch(checks, used);
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      const unsigned op = rng() % 10;
      if (op < 3) {  // a penalty
        for (std::size_t i = 0; i < used; ++i) {
          checks[i].cost = std::max<std::uint64_t>(1, checks[i].cost);
        }
        if (!Compare(memory, batch, now, where + " (penalty)", StoreOp::kPenalize)) return;
        ++penalties;
      } else if (op == 3) {  // a reward
        for (std::size_t i = 0; i < used; ++i) {
          checks[i].cost = std::max<std::uint64_t>(1, checks[i].cost);
        }
        if (!CompareRefund(memory, batch, now, where + " (reward)")) return;
      } else if (op == 4 && rng() % 4 == 0) {  // a reset of the first check's key
        ASSERT_TRUE(memory.Reset(*checks[0].policy, checks[0].key).ok());
        ASSERT_TRUE(redis_->Reset(*checks[0].policy, checks[0].key).ok());
        checks[0].cost = 0;
        if (!Compare(memory, batch.first(1), now, where + " (peek after a reset)")) return;
      } else {
        if (!Compare(memory, batch, now, where)) return;
      }
      // The state left, by a peek of each check; counts the denials of block policies.
      for (std::size_t i = 0; i < used; ++i) {
        StoreCheck peek = checks[i];
        peek.cost = 0;
        Decision d;
        ASSERT_TRUE(memory.Run({.checks = {&peek, 1}, .now = now}, {&d, 1}).ok());
        Decision r;
        ASSERT_TRUE(redis_->Run({.checks = {&peek, 1}, .now = now}, {&r, 1}).ok());
        ASSERT_TRUE(SameDecision(d, r)) << where << " peek of check " << i;
        if (!d.allowed && peek.policy->block_for > 0 && d.retry_after > 0) ++blocked;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 700);
  EXPECT_GT(penalties, 6 * 700 / 5);
  EXPECT_GT(blocked, 6 * 700 / 10) << "too few denied keys of block policies to mean much";
}

// ---- Reservations (issue #12 item 2) ----

// Reservations (StoreCheck::max_wait) and their cancellations (refunds) in both stores,
// with simulated time: random policies of all five algorithms (bucket and GCRA reserve
// future budget; the window algorithms decide plainly), random max_wait from 0 to the
// window, multi-check batches, and cancellations of earlier allowed reservations.
// Every field must match, Decision::wait included, and the state left too (peeks
// after each cancellation).
TEST_F(Differential, Reservations) {
  int compared = 0, waited = 0, cancelled = 0;
  for (std::uint64_t seed = 500; seed < 506; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 8; ++i) {
      Policy p = RandomPolicy(rng, i);
      // Mostly the algorithms that reserve.
      if (i < 5 && p.algorithm != Algorithm::kGcra) {
        p.algorithm = i % 2 ? Algorithm::kGcra : Algorithm::kTokenBucket;
        if (p.algorithm == Algorithm::kGcra) p.initial_tokens.reset();
      }
      // With the other features of #12 on some: a blocked key reserves nothing, and a
      // state recorded with its parameters reserves as any other.
      if (i % 4 == 1) p.block_for = 1 + static_cast<Micros>(rng() % p.window);
      if (i % 4 == 2 && p.algorithm != Algorithm::kSlidingWindowLog) {
        p.on_change = OnChange::kProportional;
      }
      ASSERT_TRUE(ValidatePolicy(p).ok()) << Describe(p);
      policies.push_back(p);
    }
    const char* keys[] = {"alice", "bob"};
    struct Held {
      std::string keys[3];
      StoreCheck checks[3];
      std::size_t n = 0;
    };
    std::vector<Held> held;
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 1200; ++step) {
      const Policy& tp = policies[rng() % policies.size()];
      switch (rng() % 5) {
        case 0:
        case 1:
          break;  // same instant: reservations pile up
        case 2:
          now += static_cast<Micros>(rng() % (tp.window / tp.limit + 1));
          break;
        case 3:
          now += static_cast<Micros>(rng() % 100);
          break;
        default:
          now += static_cast<Micros>(rng() % (static_cast<std::uint64_t>(tp.window) + 1));
      }
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      if (!held.empty() && rng() % 5 == 0) {
        // Cancel an earlier allowed reservation: a refund of its checks.
        const std::size_t at = rng() % held.size();
        Held h = std::move(held[at]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
        for (std::size_t i = 0; i < h.n; ++i) h.checks[i].key = h.keys[i];
        if (!CompareRefund(memory, std::span<const StoreCheck>(h.checks, h.n), now, where)) return;
        ++cancelled;
        continue;
      }
      Held h;
      const std::size_t n = 1 + rng() % 3;
      Micros smallest_window = std::numeric_limits<Micros>::max();
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t pi = rng() % policies.size();
        auto k = StoreKey("resv" + std::to_string(seed), keys[rng() % 2], policies[pi].name);
        ASSERT_TRUE(k.ok());
        bool dup = false;
        for (std::size_t j = 0; j < h.n; ++j) dup = dup || h.keys[j] == *k;
        if (dup) continue;
        h.keys[h.n] = *k;
        std::uint64_t cost = RandomCost(rng, policies[pi]);
        if (cost == 0 && rng() % 2) cost = 1;  // fewer peeks than the other tests
        h.checks[h.n] = StoreCheck{.policy = &policies[pi], .key = {}, .cost = cost};
        smallest_window = std::min(smallest_window, policies[pi].window);
        ++h.n;
      }
      // The Limiter checks 0 <= max_wait <= every policy's window.
      const Micros max_wait =
          rng() % 4 == 0
              ? 0
              : static_cast<Micros>(rng() % (static_cast<std::uint64_t>(smallest_window) + 1));
      for (std::size_t i = 0; i < h.n; ++i) {
        h.checks[i].key = h.keys[i];
        h.checks[i].max_wait = max_wait;
      }
      Decision a[3], b[3];
      ASSERT_TRUE(
          memory.Run({.checks = std::span<const StoreCheck>(h.checks, h.n), .now = now}, a).ok());
      Status sb =
          redis_->Run({.checks = std::span<const StoreCheck>(h.checks, h.n), .now = now}, b);
      ASSERT_TRUE(sb.ok()) << where << " " << sb.ToString();
      bool all = true;
      for (std::size_t i = 0; i < h.n; ++i) {
        all = all && a[i].allowed;
        const bool same = a[i].allowed == b[i].allowed && a[i].remaining == b[i].remaining &&
                          a[i].reset_after == b[i].reset_after &&
                          a[i].retry_after == b[i].retry_after && a[i].limit == b[i].limit &&
                          a[i].wait == b[i].wait;
        ASSERT_TRUE(same) << where << " check " << i << " " << Describe(*h.checks[i].policy)
                          << " cost=" << h.checks[i].cost << " max_wait=" << max_wait
                          << " now=" << now << "\n  memory: allowed=" << a[i].allowed
                          << " remaining=" << a[i].remaining << " reset_after=" << a[i].reset_after
                          << " retry_after=" << a[i].retry_after << " wait=" << a[i].wait
                          << "\n  redis:  allowed=" << b[i].allowed
                          << " remaining=" << b[i].remaining << " reset_after=" << b[i].reset_after
                          << " retry_after=" << b[i].retry_after << " wait=" << b[i].wait;
        if (a[i].wait > 0) {
          EXPECT_LE(a[i].wait, max_wait) << where;
          ++waited;
        }
      }
      ++compared;
      bool costs = true;
      for (std::size_t i = 0; i < h.n; ++i) costs = costs && h.checks[i].cost > 0;
      if (all && costs && held.size() < 64) held.push_back(std::move(h));
    }
  }
  EXPECT_GT(compared, 6 * 900);
  EXPECT_GT(waited, 150) << "too few reservations had to wait to mean much";
  EXPECT_GT(cancelled, 6 * 100);
}

}  // namespace
}  // namespace sluice::testing

// --- carry-over (Policy::on_change; issue #12 item 4) ---
namespace sluice::testing {
namespace {

// A policy of the same name with new parameters (limit, window, burst) and a mode;
// sometimes the parameters stay. Keeps the algorithm (one of the O(1) ones).
Policy ChangedPolicy(std::mt19937_64& rng, const Policy& from) {
  static const Micros kWindows[] = {1'000, 250'000, 1'000'000, 3'300'000, 60'000'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100, 1000};
  Policy p = from;
  if (rng() % 4 != 0) p.limit = kLimits[rng() % std::size(kLimits)];
  if (rng() % 4 == 0) p.window = kWindows[rng() % std::size(kWindows)];
  p.burst = 0;
  if ((p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) && rng() % 2) {
    p.burst = p.limit + rng() % (2 * p.limit + 1);
  }
  // (initial_tokens stays off: under as_is a bucket's "new again" time is the one
  // computed under the old parameters in the script and under the new ones in
  // process; docs/algorithms.md, "Changing a limit".)
  p.initial_tokens.reset();
  const OnChange modes[] = {OnChange::kReset, OnChange::kProportional, OnChange::kAsIs};
  p.on_change = modes[rng() % 3];
  EXPECT_TRUE(ValidatePolicy(p).ok()) << Describe(p);
  return p;
}

// One policy name whose parameters and mode change mid-sequence, on a few keys, with
// time moving forward, refunds, and batches with a second, unchanging policy (so the
// changed policy goes through the batch script both alone and with others): both stores
// must decide alike, field by field. (Seed 718 found that a one-check script patched
// only the count of a window whose length had changed under as_is, keeping the old
// expiry and TTL, where the in-process store moved them.)
TEST_F(Differential, LimitChangesMidSequence) {
  int compared = 0, changes = 0;
  for (std::uint64_t seed = 700; seed < 724; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    Policy p = RandomPolicy(rng, 0);
    if (p.algorithm == Algorithm::kSlidingWindowLog) p.algorithm = Algorithm::kGcra;
    p.initial_tokens.reset();
    p.name = "carry";
    p = ChangedPolicy(rng, p);
    Policy other = Policy::FixedWindow("other", 1000, std::chrono::seconds(1));
    const char* keys[] = {"alice", "bob", "{carol}"};
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 600; ++step) {
      if (rng() % 25 == 0) {
        p = ChangedPolicy(rng, p);
        ++changes;
      }
      switch (rng() % 4) {
        case 0:
          break;
        case 1:
          now += static_cast<Micros>(rng() % 100);
          break;
        case 2:
          now += static_cast<Micros>(rng() % (2 * p.window / p.limit + 1));
          break;
        default:
          now += static_cast<Micros>(rng() % 3'000'000);
      }
      const char* key = keys[rng() % std::size(keys)];
      const std::string k1 = *StoreKey("carry" + std::to_string(seed), key, p.name);
      const std::string k2 = *StoreKey("carry" + std::to_string(seed), key, other.name);
      StoreCheck checks[2] = {{.policy = &p, .key = k1, .cost = RandomCost(rng, p)},
                              {.policy = &other, .key = k2, .cost = 1}};
      const std::size_t n = rng() % 3 == 0 ? 2 : 1;
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) +
                                " mode " + OnChangeName(p.on_change);
      if (rng() % 6 == 0) {
        checks[0].cost = std::max<std::uint64_t>(1, checks[0].cost);
        if (!CompareRefund(memory, std::span<const StoreCheck>(checks, n), now, where)) return;
      } else if (!Compare(memory, std::span<const StoreCheck>(checks, n), now, where)) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 24 * 600);
  EXPECT_GT(changes, 24 * 600 / 40);
}

}  // namespace
}  // namespace sluice::testing

// --- every operation with on_change, block_for and permits (issue #17's constraint) ---
namespace sluice::testing {
namespace {

// Compares a peek of each check's key on both stores: the state an operation left.
bool ComparePeeks(Store& memory, Store& redis, std::span<const StoreCheck> checks, Micros now,
                  const std::string& where) {
  for (const StoreCheck& c : checks) {
    StoreCheck peek = c;
    peek.cost = 0;
    peek.max_wait = 0;
    if (peek.policy->algorithm == Algorithm::kConcurrency) peek.permit = {};
    Decision a, b;
    const Status sa = memory.Run({.checks = {&peek, 1}, .now = now}, {&a, 1});
    const Status sb = redis.Run({.checks = {&peek, 1}, .now = now}, {&b, 1});
    if (!sa.ok() || !sb.ok() || !SameDecision(a, b)) {
      ADD_FAILURE() << where << ": peek of " << Describe(*c.policy) << " on_change "
                    << OnChangeName(c.policy->on_change) << " block_for " << c.policy->block_for
                    << "\n  memory: " << sa.ToString() << " allowed=" << a.allowed
                    << " remaining=" << a.remaining << " reset_after=" << a.reset_after
                    << " retry_after=" << a.retry_after << "\n  redis:  " << sb.ToString()
                    << " allowed=" << b.allowed << " remaining=" << b.remaining
                    << " reset_after=" << b.reset_after << " retry_after=" << b.retry_after;
      return false;
    }
  }
  return true;
}

// Every store operation (decide, peek, reserve with max_wait, refund, penalize, and on
// a concurrency policy acquire, release and extend) on one policy name whose
// parameters and on_change mode change mid-sequence (each mode in turn), with block_for
// on half of the sequences, batched with a concurrency policy and a plain one: both
// stores answer alike, field by field (Decision::wait included), and leave the same
// state (a peek of every key after every operation). Hot-key leases and shadow mode
// reach the store only as these operations (a lease is a decision of a larger cost,
// its return a refund; shadow mode runs the same decision).
TEST_F(Differential, EveryOperationUnderOnChangeBlocksAndPermits) {
  int compared = 0, penalties = 0, reserves = 0, permit_ops = 0;
  int modes[3] = {0, 0, 0};
  for (std::uint64_t seed = 800; seed < 812; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    Policy p = RandomPolicy(rng, 0);
    if (p.algorithm == Algorithm::kSlidingWindowLog) p.algorithm = Algorithm::kTokenBucket;
    p.initial_tokens.reset();
    p.name = "ops";
    if (seed % 2 == 0) p.block_for = 1 + static_cast<Micros>(rng() % (2 * p.window));
    p = ChangedPolicy(rng, p);
    const Policy perm = Policy::Concurrency("perm", 1 + rng() % 4, std::chrono::milliseconds(250));
    const Policy other = Policy::SlidingWindowCounter("other", 50, std::chrono::seconds(1));
    const std::string prefix = "ops" + std::to_string(seed);
    std::vector<std::string> held;  // permit ids acquired (maybe released or expired)
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 500; ++step) {
      if (rng() % 30 == 0) p = ChangedPolicy(rng, p);
      ++modes[static_cast<int>(p.on_change)];
      switch (rng() % 4) {
        case 0:
          break;
        case 1:
          now += static_cast<Micros>(rng() % 1000);
          break;
        case 2:
          now += static_cast<Micros>(rng() % (2 * p.window / p.limit + 1));
          break;
        default:
          now += static_cast<Micros>(rng() % (p.window + p.block_for + 1));
      }
      const char* caller = rng() % 2 ? "alice" : "bob";
      const std::string kp = *StoreKey(prefix, caller, p.name);
      const std::string kc = *StoreKey(prefix, caller, perm.name);
      const std::string ko = *StoreKey(prefix, caller, other.name);
      std::string id(kPermitIdLength, '0');
      for (char& ch : id) ch = "0123456789abcdef"[rng() % 16];
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) +
                                " " + Describe(p) + " on_change " + OnChangeName(p.on_change) +
                                " block_for " + std::to_string(p.block_for);
      StoreCheck checks[3];
      std::size_t n = 0;
      const unsigned op = rng() % 10;
      if (op < 2) {  // release or extend of a permit acquired earlier (or never)
        const std::string pid = !held.empty() && rng() % 4 ? held[rng() % held.size()] : id;
        checks[n++] = {.policy = &perm, .key = kc, .cost = 1, .permit = pid};
        const StoreOp o = op == 0 ? StoreOp::kRelease : StoreOp::kExtend;
        if (!Compare(memory, {checks, n}, now, where + " (permit)", o)) return;
        ++permit_ops;
      } else if (op < 4) {  // a penalty (not for concurrency)
        checks[n++] = {.policy = &p, .key = kp, .cost = 1 + rng() % p.Capacity()};
        if (rng() % 2) checks[n++] = {.policy = &other, .key = ko, .cost = 1 + rng() % 3};
        if (!Compare(memory, {checks, n}, now, where + " (penalty)", StoreOp::kPenalize)) return;
        ++penalties;
      } else if (op == 4) {  // a refund (a reward, a returned lease, a cancelled reservation)
        checks[n++] = {.policy = &p, .key = kp, .cost = 1 + rng() % p.Capacity()};
        if (!CompareRefund(memory, {checks, n}, now, where + " (refund)")) return;
      } else {  // a decision: plain, a peek, or a reservation, maybe with a permit
        checks[n++] = {.policy = &p, .key = kp, .cost = RandomCost(rng, p)};
        if (op >= 8) {
          const bool peek = rng() % 4 == 0;
          checks[n++] = {.policy = &perm,
                         .key = kc,
                         .cost = peek ? 0u : 1u,
                         .permit = peek ? std::string_view() : std::string_view(id)};
        }
        if (rng() % 2) checks[n++] = {.policy = &other, .key = ko, .cost = 1};
        Micros max_wait = 0;
        if (op == 7 && n == 1) {
          max_wait = static_cast<Micros>(rng() % (static_cast<std::uint64_t>(p.window) + 1));
          checks[0].max_wait = max_wait;
          ++reserves;
        }
        Decision a[3], b[3];
        ASSERT_TRUE(memory.Run({.checks = {checks, n}, .now = now}, a).ok()) << where;
        const Status sb = redis_->Run({.checks = {checks, n}, .now = now}, b);
        ASSERT_TRUE(sb.ok()) << where << " " << sb.ToString();
        bool all = true;
        for (std::size_t i = 0; i < n; ++i) {
          all = all && a[i].allowed;
          ASSERT_TRUE(SameDecision(a[i], b[i]) && a[i].wait == b[i].wait)
              << where << " check " << i << " " << Describe(*checks[i].policy)
              << " cost=" << checks[i].cost << " max_wait=" << max_wait
              << "\n  memory: allowed=" << a[i].allowed << " remaining=" << a[i].remaining
              << " reset_after=" << a[i].reset_after << " retry_after=" << a[i].retry_after
              << " wait=" << a[i].wait << "\n  redis:  allowed=" << b[i].allowed
              << " remaining=" << b[i].remaining << " reset_after=" << b[i].reset_after
              << " retry_after=" << b[i].retry_after << " wait=" << b[i].wait;
        }
        if (all && n >= 2 && checks[1].policy == &perm && checks[1].cost == 1) held.push_back(id);
      }
      if (!ComparePeeks(memory, *redis_, {checks, n}, now, where + " op " + std::to_string(op))) {
        return;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12 * 500);
  EXPECT_GT(penalties, 12 * 500 / 8);
  EXPECT_GT(reserves, 12 * 500 / 20);
  EXPECT_GT(permit_ops, 12 * 500 / 8);
  for (int m = 0; m < 3; ++m) EXPECT_GT(modes[m], 12 * 500 / 10) << "mode " << m;
}

}  // namespace
}  // namespace sluice::testing

// --- a lease changed under the same policy name (issue #20 item 1) ---
namespace sluice::testing {
namespace {

// The sequence, field by field in both stores: A under a 60 s lease, B under
// 1 s, past B's expiry C (allowed) and D (denied), a peek, a limit lowered to 1, and
// extends and releases under the other lease; on random ids and leases too.
TEST_F(Differential, ALeaseChangedUnderTheSameName) {
  int compared = 0;
  for (std::uint64_t seed = 900; seed < 910; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    static const Micros kLeases[] = {1'000'000, 60'000'000, 7'000, 250'000};
    const Micros first = seed == 900 ? 60'000'000 : kLeases[rng() % 4];
    const Micros second = seed == 900 ? 1'000'000 : kLeases[rng() % 4];
    const Policy longer = Policy::Concurrency("pc", 2, std::chrono::microseconds(first));
    const Policy shorter = Policy::Concurrency("pc", 2, std::chrono::microseconds(second));
    const Policy one = Policy::Concurrency("pc", 1, std::chrono::microseconds(second));
    const std::string key = *StoreKey("lc" + std::to_string(seed), "k", "pc");
    const char* ids[] = {"0000000000000000000000000000000a", "0000000000000000000000000000000b",
                         "0000000000000000000000000000000c", "0000000000000000000000000000000d"};
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    const Policy* policies[] = {&longer, &shorter, &one};
    for (int step = 0; step < 60; ++step) {
      const Policy* p = step == 0 ? &longer : step < 4 ? &shorter : policies[rng() % 3];
      StoreOp op = StoreOp::kDecide;
      if (step >= 5) op = static_cast<StoreOp>(rng() % 3 == 0 ? 0 : 2 + rng() % 3);
      if (op == StoreOp::kPenalize) op = StoreOp::kDecide;
      const bool peek = op == StoreOp::kDecide && (step == 4 || rng() % 5 == 0);
      const StoreCheck c{.policy = p,
                         .key = key,
                         .cost = peek ? 0u : 1u,
                         .permit = peek ? std::string_view() : ids[step < 4 ? step : rng() % 4]};
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      if (!Compare(memory, {&c, 1}, now, where, op)) return;
      ++compared;
      if (step == 1) now += second + second / 2;  // past B's lease, not A's (seed 900)
      if (step >= 5) now += static_cast<Micros>(rng() % (second + 1));
    }
  }
  EXPECT_EQ(compared, 10 * 60);
}

// ---- Usage charged after the fact (issue #21 item 3) ----

// Overage charges (Policy::overage charge and drain, random max_debt), usage
// reservations and their settles in both stores, with simulated time: random policies
// of the five rate algorithms, some with block_for or a carry-over mode; batches of one
// caller's checks (one hash slot, as the Limiter's keys of a caller key) with costs up
// to three capacities (a usage report above the capacity); reservations settled with
// an actual above or below the estimate, some after their window, some retried (they
// must answer "already settled" and change nothing), some never; and settles of an
// unknown id (NotFound in both, nothing changed). Every field must match, `charged`
// included, and the state left too (peeks).
TEST_F(Differential, OverageChargesAndSettles) {
  int compared = 0, charged = 0, settles = 0, retried = 0, unknown = 0, expired = 0;
  for (std::uint64_t seed = 2100; seed < 2106; ++seed) {
    std::mt19937_64 rng(seed);
    DifferentialMemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 6; ++i) {
      Policy p = RandomPolicy(rng, i);
      p.window = std::min<Micros>(p.window, 60'000'000);
      p.overage = i % 3 == 2 ? Overage::kReject : (rng() % 2 ? Overage::kCharge : Overage::kDrain);
      if (p.overage == Overage::kCharge && rng() % 2) {
        p.max_debt = 1 + rng() % (2 * p.Capacity());
        if (p.algorithm == Algorithm::kSlidingWindowLog) p.max_debt = std::min(p.max_debt, p.limit);
      }
      if (rng() % 4 == 0) p.block_for = 1 + static_cast<Micros>(rng() % (2 * p.window));
      if (rng() % 4 == 0 && p.algorithm != Algorithm::kSlidingWindowLog) {
        p.on_change = rng() % 2 ? OnChange::kReset : OnChange::kProportional;
      }
      ASSERT_TRUE(ValidatePolicy(p).ok()) << Describe(p) << ValidatePolicy(p).message();
      policies.push_back(p);
    }
    const char* callers[] = {"llm", "svc"};
    const std::string prefix = "ovg" + std::to_string(seed);
    struct Open {
      std::vector<StoreCheck> checks;
      std::vector<std::string> keys;
      std::string id;
      bool settled = false;
    };
    std::vector<Open> open;
    Micros now = kNoon + static_cast<Micros>(rng() % 1'000'000'000);
    for (int step = 0; step < 600; ++step) {
      const Policy& tp = policies[rng() % policies.size()];
      switch (rng() % 4) {
        case 0:
          break;
        case 1:
          now += static_cast<Micros>(rng() % (2 * tp.window / tp.limit + 1));
          break;
        case 2:
          now += static_cast<Micros>(rng() % (tp.window + 1));  // a settle after its window too
          break;
        default:
          now += static_cast<Micros>(rng() % 1000);
      }
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      const unsigned op = rng() % 10;
      if (op < 3 && !open.empty()) {  // a settle (or its retry) of an earlier reservation
        Open& o = open[rng() % open.size()];
        retried += o.settled ? 1 : 0;
        o.settled = true;
        for (StoreCheck& c : o.checks) c.cost = rng() % (2 * c.policy->Capacity() + 1);
        for (StoreCheck& c : o.checks) c.cost = std::min(c.cost, c.policy->MaxCost());
        // A record that expired (usage_ttl) is NotFound in both, and nothing changes.
        Decision a[3], b[3];
        const Status sa = memory.Run({.op = StoreOp::kSettle, .checks = o.checks, .now = now}, a);
        const Status sb = redis_->Run({.op = StoreOp::kSettle, .checks = o.checks, .now = now}, b);
        ASSERT_EQ(sa.code(), sb.code()) << where << " " << sa.ToString() << " / " << sb.ToString();
        if (sa.code() == ErrorCode::kNotFound) {
          ++expired;
        } else {
          ASSERT_TRUE(sa.ok()) << where << " " << sa.ToString();
          for (std::size_t i = 0; i < o.checks.size(); ++i) {
            ASSERT_TRUE(SameDecision(a[i], b[i]))
                << where << " settle check " << i << " " << Describe(*o.checks[i].policy)
                << " actual=" << o.checks[i].cost << "\n  memory: allowed=" << a[i].allowed
                << " remaining=" << a[i].remaining << " reset_after=" << a[i].reset_after
                << " retry_after=" << a[i].retry_after << " charged=" << a[i].charged
                << "\n  redis:  allowed=" << b[i].allowed << " remaining=" << b[i].remaining
                << " reset_after=" << b[i].reset_after << " retry_after=" << b[i].retry_after
                << " charged=" << b[i].charged;
          }
          ++settles;
        }
        continue;
      }
      const char* caller = callers[rng() % 2];
      Open o;
      o.keys.resize(3);
      for (std::size_t i = 0, n = 1 + rng() % 3; i < n; ++i) {
        const std::size_t pi = rng() % policies.size();
        const std::string k = *StoreKey(prefix, caller, policies[pi].name);
        bool dup = false;
        for (std::size_t j = 0; j < o.checks.size(); ++j) dup = dup || o.keys[j] == k;
        if (dup) continue;
        o.keys[o.checks.size()] = k;
        const Policy& p = policies[pi];
        std::uint64_t cost = RandomCost(rng, p);
        if (p.overage != Overage::kReject && rng() % 3 == 0) cost = 1 + rng() % (3 * p.Capacity());
        o.checks.push_back(StoreCheck{.policy = &p, .key = o.keys[o.checks.size()], .cost = cost});
      }
      for (std::size_t i = 0; i < o.checks.size(); ++i) o.checks[i].key = o.keys[i];
      if (op == 3) {  // a settle of an id nobody reserved: NotFound in both, nothing changed
        const std::string id(kPermitIdLength, "0123456789abcdef"[rng() % 16]);
        for (StoreCheck& c : o.checks) c.usage_id = id;
        Decision a[3], b[3];
        const Status sa = memory.Run({.op = StoreOp::kSettle, .checks = o.checks, .now = now}, a);
        const Status sb = redis_->Run({.op = StoreOp::kSettle, .checks = o.checks, .now = now}, b);
        ASSERT_EQ(sa.code(), ErrorCode::kNotFound) << where << sa.ToString();
        ASSERT_EQ(sb.code(), ErrorCode::kNotFound) << where << sb.ToString();
        ASSERT_NE(sb.message().find(id), std::string::npos) << sb.message();
        ++unknown;
      } else if (op < 6) {  // a reservation: recorded under a fresh id
        o.id = std::string(kPermitIdLength, '0');
        for (char& ch : o.id) ch = "0123456789abcdef"[rng() % 16];
        for (StoreCheck& c : o.checks) {
          c.usage_id = o.id;
          // Mostly kept long enough; a quarter expire within about a window.
          c.usage_ttl = rng() % 4 == 0 ? 1'000 + static_cast<Micros>(rng() % (2 * c.policy->window))
                                       : 3'600'000'000;
        }
        if (!Compare(memory, o.checks, now, where + " (reserve)")) return;
        open.push_back(std::move(o));
        if (open.size() > 8) open.erase(open.begin());
      } else if (!Compare(memory, o.checks, now, where)) {
        return;
      }
      // The state left, by a peek of each check; counts the charged denials.
      const Open& last = op >= 3 && op < 6 && op != 3 ? open.back() : o;
      for (const StoreCheck& c : last.checks) {
        StoreCheck peek{.policy = c.policy, .key = c.key, .cost = 0};
        Decision d, r;
        ASSERT_TRUE(memory.Run({.checks = {&peek, 1}, .now = now}, {&d, 1}).ok());
        ASSERT_TRUE(redis_->Run({.checks = {&peek, 1}, .now = now}, {&r, 1}).ok());
        ASSERT_TRUE(SameDecision(d, r)) << where << " peek " << c.key;
        charged += d.remaining == 0 && c.policy->overage != Overage::kReject ? 1 : 0;
      }
      ++compared;
    }
  }
  SCOPED_TRACE("compared " + std::to_string(compared) + ", settles " + std::to_string(settles) +
               ", retried " + std::to_string(retried) + ", unknown " + std::to_string(unknown) +
               ", expired " + std::to_string(expired) + ", at the bound " +
               std::to_string(charged));
  EXPECT_GT(compared, 6 * 600 / 2);
  EXPECT_GT(settles, 6 * 600 / 10);
  EXPECT_GT(retried, 6 * 600 / 50) << "too few retried settles to mean much";
  EXPECT_GT(unknown, 6 * 600 / 20);
  EXPECT_GT(charged, 6 * 600 / 10) << "too few keys at their bound to mean much";
  EXPECT_GT(expired, 0) << "no settle met an expired reservation";
}

}  // namespace
}  // namespace sluice::testing
