// The native Redis module (src/redis/module, docs/redis.md "The native module") against
// the Lua scripts, on real redis-servers started with --loadmodule: the same random
// sequences decided by the scripts and by the module must give identical decisions and
// leave the same bytes; a keyspace moves between them live; the module replicates its
// effects (not the command) to replicas and the AOF. On Redis 7.0 and on Valkey 8.
#include <gtest/gtest.h>

#include <random>

#include "edge_policies.h"
#include "module_support.h"
#include "redis_server.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::testing {
namespace {

// One server with the module; a store on it through the scripts (module=off) and one
// through the module (the fixture of the tests that compare the two).
class LuaAndModule : public OnServer {
 protected:
  void SetUp() override {
    auto started = StartWithModule();
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(*started);
    lua = Open(server->Url() + "?module=off");
    mod = Open(server->Url());
    ASSERT_TRUE(lua && mod);
  }
  std::unique_ptr<RedisServer> server;
  std::shared_ptr<RedisStore> lua, mod;
};
class ModuleDifferential : public LuaAndModule {};
class ModulePenalty : public LuaAndModule {};
class ModuleKeyspace : public LuaAndModule {};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleDifferential, kEveryServer, ServerName);
INSTANTIATE_TEST_SUITE_P(Servers, ModulePenalty, kEveryServer, ServerName);
INSTANTIATE_TEST_SUITE_P(Servers, ModuleKeyspace, kEveryServer, ServerName);

// Sliding logs whose keys outgrow the inline form within a window: limits above its 8
// entries, windows of a minute or an hour; a third with a block.
Policy RandomSlidingLog(std::mt19937_64& rng, int index) {
  static const std::uint64_t kLimits[] = {9, 10, 17, 100};
  Policy p;
  p.name = "log" + std::to_string(index);
  p.algorithm = Algorithm::kSlidingWindowLog;
  p.limit = kLimits[rng() % std::size(kLimits)];
  p.window = rng() % 2 ? 60'000'000 : 3'600'000'000;
  if (rng() % 3 == 0) p.block_for = p.window * static_cast<Micros>(1 + rng() % 3);
  EXPECT_TRUE(ValidatePolicy(p).ok());
  return p;
}

// Which policies ExpectRandomSequencesAsLua draws.
enum class Mix {
  kRandom,       // four RandomPolicy, the clock wide (idle gaps, a little back)
  kVersions,     // four versions of one policy sharing their keys (Versions), so that
                 // states recorded under one are read under another (carry-over)
  kSlidingLogs,  // four RandomSlidingLog, the clock narrow (each key's requests in a window)
};

// The same random sequences through the Lua scripts (module=off) and through the
// module, on keys of their own in one server: identical decisions, field by field, and
// each sliding log's state and sorted set the same bytes. Returns how many of those
// logs the module moved into their sorted set.
int ExpectRandomSequencesAsLua(RedisStore& lua, RedisStore& mod, const RedisServer& server,
                               Mix mix) {
  const bool versions = mix == Mix::kVersions;
  std::vector<std::string> lk, mk;
  int sorted_sets = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<Policy> policies;
    if (versions) {
      policies = Versions(rng, RandomPolicy(rng, 0));
    } else {
      for (int i = 0; i < 4; ++i) {
        policies.push_back(mix == Mix::kSlidingLogs ? RandomSlidingLog(rng, i)
                                                    : RandomPolicy(rng, i));
      }
    }
    Micros now = 1'785'000'000'000'000 + static_cast<Micros>(rng() % 1'000'000'000);
    const std::string tag = "s" + std::to_string(seed) + ":";
    for (int step = 0; step < 250; ++step) {
      Step s = RandomStep(rng, policies, &now, /*wide=*/mix != Mix::kSlidingLogs);
      if (versions) {
        // one key space: "k<n>" whichever version decides (the keys stay distinct)
        for (int& k : s.keys) k %= 100;
      }
      const auto a = Prefixed(s, "lua:" + tag, &lk);
      const auto b = Prefixed(s, "mod:" + tag, &mk);
      Decision da[kMaxBatchChecks], db[kMaxBatchChecks];
      const Status sa = RunOn(lua, s.op, a, s.now, da);
      const Status sb = RunOn(mod, s.op, b, s.now, db);
      EXPECT_TRUE(sa.ok() && sb.ok()) << sa.ToString() << " / " << sb.ToString();
      if (!sa.ok() || !sb.ok()) return sorted_sets;
      if (s.op == StoreOp::kRefund) continue;
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(Same(da[i], db[i]))
            << "seed " << seed << " step " << step << " op " << static_cast<int>(s.op) << " check "
            << i << " " << AlgorithmName(a[i].policy->algorithm) << " cost=" << a[i].cost
            << " on_change=" << static_cast<int>(a[i].policy->on_change)
            << "\n  lua:    " << Describe(da[i]) << "\n  module: " << Describe(db[i]);
        if (!Same(da[i], db[i])) return sorted_sets;
      }
    }
    // Each sliding log's state and sorted set: the scripts' bytes (one key space for the
    // versions: each key once).
    for (std::size_t pi = 0; pi < (versions ? 1 : policies.size()); ++pi) {
      if (policies[pi].algorithm != Algorithm::kSlidingWindowLog) continue;
      for (std::size_t k = 0; k < 6; ++k) {
        const std::string name = "k" + std::to_string(versions ? k : pi * 100 + k);
        for (const std::string suffix : {"", ":log"}) {
          const std::string a = Contents(server, "lua:" + tag + name + suffix);
          const std::string b = Contents(server, "mod:" + tag + name + suffix);
          EXPECT_EQ(a, b) << "seed " << seed << " key " << name << suffix;
          if (b.starts_with("zset")) ++sorted_sets;
        }
      }
    }
  }
  // The module decided the second store's calls, the scripts only the first's.
  EXPECT_GT(ModuleCalls(server), 0);
  ExpectEveryKeyHasTtl(server);
  return sorted_sets;
}

TEST_P(ModuleDifferential, RandomSequencesMatchLua) {
  ExpectRandomSequencesAsLua(*lua, *mod, *server, Mix::kRandom);
}

// The same with four versions of one policy on one key space: states recorded under one
// version, read under another per its on_change (reset, proportional, as it is).
TEST_P(ModuleDifferential, CarryOverBetweenVersionsMatchesLua) {
  ExpectRandomSequencesAsLua(*lua, *mod, *server, Mix::kVersions);
}

// Sliding logs past their inline form: the spill into the sorted set, its trims,
// refunds and penalties on both forms, blocks, and denials whose retry time is searched
// in the set, as the scripts do them.
TEST_P(ModuleDifferential, SlidingLogsPastTheInlineFormMatchLua) {
  EXPECT_GT(ExpectRandomSequencesAsLua(*lua, *mod, *server, Mix::kSlidingLogs), 10)
      << "too few sliding logs outgrew their inline form";
}

// Every algorithm at the edges of what ValidatePolicy accepts, every operation and cost,
// time far forward and back (tests/support/edge_policies.h), through the scripts and
// through the module on keys of their own: identical decisions. (Checks the module does
// not decide, overage ones, run the scripts on both.)
TEST_P(ModuleDifferential, EdgePoliciesMatchLua) {
  const std::vector<Policy> policies = edge::Policies();
  int compared = 0;
  for (std::size_t pi = 0; pi < policies.size(); ++pi) {
    const Policy& p = policies[pi];
    const std::string lk = "lua:edge:" + std::to_string(pi), mk = "mod:edge:" + std::to_string(pi);
    for (const edge::Step& step : edge::Steps(p, /*back=*/true)) {
      const StoreCheck a{.policy = &p, .key = lk, .cost = step.cost, .max_wait = step.max_wait};
      StoreCheck b = a;
      b.key = mk;
      Decision da, db;
      const Status sa = RunOn(*lua, step.op, {&a, 1}, step.now, &da);
      const Status sb = RunOn(*mod, step.op, {&b, 1}, step.now, &db);
      const std::string where =
          "policy " + std::to_string(pi) + " " + edge::Describe(p) + " " + step.Describe();
      ASSERT_TRUE(sa.ok() && sb.ok()) << where << ": " << sa.ToString() << " / " << sb.ToString();
      if (step.op == StoreOp::kRefund) continue;
      ASSERT_TRUE(Same(da, db)) << where << "\n  lua:    " << Describe(da)
                                << "\n  module: " << Describe(db);
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(ModuleCalls(*server), 0);
}

// A sorted set of the older member layout ("<count>:<cost>", before the running sums)
// is read as the scripts read it: a denial's retry time by their walk (past its first
// page of 64 entries), a partial refund keeping the older member's count, new entries
// appended after the older ones; decisions and bytes as the scripts'.
TEST_P(ModuleDifferential, OlderLogMembersAreReadAsTheScriptsReadThem) {
  const Policy p = Policy::SlidingWindowLog("old", 150, std::chrono::hours(1));
  const Micros t0 = 1'785'000'000'000'000;
  for (const std::string prefix : {"lua:old", "mod:old"}) {
    // 99 entries of 1 and a newest of 5: used 104, the older layout's count 100
    std::vector<std::string> zadd = {"ZADD", prefix + ":log"};
    for (int i = 1; i <= 100; ++i) {
      zadd.push_back(std::to_string(t0 - (100 - i) * 1'000));
      zadd.push_back(std::to_string(i) + ":" + (i == 100 ? "5" : "1"));
    }
    ASSERT_TRUE(server->Command(zadd).ok());
    ASSERT_TRUE(server->Command({"PEXPIRE", prefix + ":log", "7200000"}).ok());
    const std::string state =
        "1 " + std::to_string(t0 + p.window) + " " + std::to_string(t0) + " 104 100";
    ASSERT_TRUE(server->Command({"SET", prefix, state, "PX", "7200000"}).ok());
  }
  const long long before = ModuleCalls(*server);
  struct Step {
    StoreOp op;
    std::uint64_t cost;
  } steps[] = {
      {StoreOp::kDecide, 60},     // denied: the walk's first page
      {StoreOp::kDecide, 120},    // denied: its second page
      {StoreOp::kRefund, 2},      // "100:5" becomes "100:3"
      {StoreOp::kDecide, 1},      // a member of the current layout after the older ones
      {StoreOp::kDecide, 100},    // denied: the walk (the oldest member is older)
      {StoreOp::kPenalize, 150},  // bounded at 300 units
      {StoreOp::kRefund, 150},   {StoreOp::kDecide, 0},
  };
  Micros now = t0;
  for (const Step& st : steps) {
    now += 1'000;
    const StoreCheck a{.policy = &p, .key = "lua:old", .cost = st.cost};
    const StoreCheck b{.policy = &p, .key = "mod:old", .cost = st.cost};
    Decision da, db;
    ASSERT_TRUE(RunOn(*lua, st.op, {&a, 1}, now, &da).ok());
    ASSERT_TRUE(RunOn(*mod, st.op, {&b, 1}, now, &db).ok());
    const std::string where =
        "op " + std::to_string(static_cast<int>(st.op)) + " cost " + std::to_string(st.cost);
    if (st.op != StoreOp::kRefund) {
      EXPECT_TRUE(Same(da, db)) << where << "\n  lua:    " << Describe(da)
                                << "\n  module: " << Describe(db);
    }
    EXPECT_EQ(Contents(*server, "lua:old"), Contents(*server, "mod:old")) << where;
    EXPECT_EQ(Contents(*server, "lua:old:log"), Contents(*server, "mod:old:log")) << where;
  }
  EXPECT_NE(Contents(*server, "mod:old:log").find("|100:3|"), std::string::npos);
  EXPECT_EQ(ModuleCalls(*server) - before, std::size(steps));
  ExpectEveryKeyHasTtl(*server);
}

// A penalty under an as_is policy on a state recorded under other parameters (written
// by a policy with on_change) reads it as a decision does, as it is: the scripts, the
// module and the in-process store agree on the decision and the scripts and the module
// write the same bytes.
TEST_P(ModulePenalty, ARecordedStateUnderAsIsIsReadAsADecisionReadsIt) {
  const Algorithm all[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowCounter,
                           Algorithm::kTokenBucket, Algorithm::kGcra};
  const Micros now = 1'785'000'000'000'000;
  const long long before = ModuleCalls(*server);
  for (Algorithm a : all) {
    Policy recorded;
    recorded.name = "p";
    recorded.algorithm = a;
    recorded.limit = 10;
    recorded.window = 60'000'000;
    recorded.on_change = OnChange::kProportional;
    Policy plain = recorded;
    plain.on_change = OnChange::kAsIs;
    plain.limit = 20;
    ASSERT_TRUE(ValidatePolicy(recorded).ok() && ValidatePolicy(plain).ok());
    MemoryStore memory;
    const std::string name = AlgorithmName(a);
    const std::string kl = "rec:{" + name + "}:lua", km = "rec:{" + name + "}:mod";
    for (const std::string* k : {&kl, &km}) {
      const StoreCheck take{.policy = &recorded, .key = *k, .cost = 5};
      Decision d;
      ASSERT_TRUE(RunOn(*lua, StoreOp::kDecide, {&take, 1}, now, &d).ok());
      ASSERT_TRUE(d.allowed);
      if (k == &kl) {
        ASSERT_TRUE(RunOn(memory, StoreOp::kDecide, {&take, 1}, now, &d).ok());
      }
    }
    const StoreCheck pl{.policy = &plain, .key = kl, .cost = 1};
    const StoreCheck pm{.policy = &plain, .key = km, .cost = 1};
    Decision dl, dm, dmem;
    ASSERT_TRUE(RunOn(*lua, StoreOp::kPenalize, {&pl, 1}, now + 1000, &dl).ok());
    ASSERT_TRUE(RunOn(*mod, StoreOp::kPenalize, {&pm, 1}, now + 1000, &dm).ok());
    ASSERT_TRUE(RunOn(memory, StoreOp::kPenalize, {&pl, 1}, now + 1000, &dmem).ok());
    EXPECT_TRUE(Same(dl, dmem)) << name << "\n  lua:    " << Describe(dl)
                                << "\n  memory: " << Describe(dmem);
    EXPECT_TRUE(Same(dm, dmem)) << name << "\n  module: " << Describe(dm)
                                << "\n  memory: " << Describe(dmem);
    const std::string sl = server->Command({"GET", kl})->str;
    const std::string sm = server->Command({"GET", km})->str;
    if (a == Algorithm::kGcra) {  // the TAT as a number, which the module may spell shorter
      EXPECT_EQ(std::stod(sl), std::stod(sm)) << sl << " / " << sm;
    } else {
      EXPECT_EQ(sl, sm) << name;
    }
  }
  EXPECT_GE(ModuleCalls(*server) - before, 4) << "the module took the penalties";
}

// One keyspace, each step decided at random by the scripts or by the module, against
// the in-process store: the layouts each writes are read exactly by the other (seeds
// 31-34: sliding logs past their inline form, so that both of its forms move).
TEST_P(ModuleKeyspace, MovesLiveBetweenLuaAndModule) {
  for (std::uint64_t seed = 21; seed <= 34; ++seed) {
    std::mt19937_64 rng(seed);
    MemoryStore memory;
    std::vector<Policy> policies;
    for (int i = 0; i < 3; ++i) {
      policies.push_back(seed <= 30 ? RandomPolicy(rng, i) : RandomSlidingLog(rng, i));
    }
    Micros now = 1'785'000'000'000'000;
    std::vector<std::string> keys;
    for (int step = 0; step < 300; ++step) {
      const Step s = RandomStep(rng, policies, &now, /*wide=*/false);
      const auto c = Prefixed(s, "live:" + std::to_string(seed) + ":", &keys);
      Store& redis = rng() % 2 ? static_cast<Store&>(*lua) : static_cast<Store&>(*mod);
      Decision dm[kMaxBatchChecks], dr[kMaxBatchChecks];
      ASSERT_TRUE(RunOn(memory, s.op, c, s.now, dm).ok());
      ASSERT_TRUE(RunOn(redis, s.op, c, s.now, dr).ok());
      if (s.op == StoreOp::kRefund) continue;
      for (std::size_t i = 0; i < c.size(); ++i) {
        ASSERT_TRUE(Same(dm[i], dr[i]))
            << "seed " << seed << " step " << step << " by "
            << (&redis == lua.get() ? "lua" : "module") << " "
            << AlgorithmName(c[i].policy->algorithm) << "\n  memory: " << Describe(dm[i])
            << "\n  redis:  " << Describe(dr[i]);
      }
    }
  }
  // (sliding logs among the policies outgrew their inline form: both forms moved too)
  auto sets = server->Command({"KEYS", "live:*:log"});
  ASSERT_TRUE(sets.ok());
  EXPECT_GT(sets->elements.size(), 0u) << "no sliding log reached its sorted set";
  ExpectEveryKeyHasTtl(*server);
}

// One call of four checks, one per algorithm the module decides, on keys `prefix` +
// the policy's name (kept in `keys`), three times on the server's clock: each allowed.
void DecideEachAlgorithmThrice(RedisStore& store, const std::string& prefix,
                               std::vector<std::string>* keys) {
  static const Policy policies[] = {Policy::FixedWindow("f", 10, std::chrono::minutes(1)),
                                    Policy::Gcra("g", 10, std::chrono::minutes(1), 5),
                                    Policy::TokenBucket("t", 10, 5, std::chrono::minutes(1)),
                                    Policy::SlidingWindowCounter("c", 10, std::chrono::minutes(1))};
  keys->clear();
  for (const Policy& p : policies) keys->push_back(prefix + p.name);
  for (int round = 0; round < 3; ++round) {
    StoreCheck checks[4];
    for (std::size_t i = 0; i < 4; ++i) checks[i] = {.policy = &policies[i], .key = (*keys)[i]};
    Decision d[4];
    ASSERT_TRUE(store.Run({.checks = checks, .now = 0}, d).ok());
    for (const Decision& x : d) EXPECT_TRUE(x.allowed);
  }
}

// A sliding log on key `prefix` + "log" decided kSpillCalls times on the server's clock
// (each allowed): its ninth entry spills it into its sorted set. Adds its state key and
// its ":log" key to `keys`.
constexpr int kSpillCalls = 10;
void SpillASlidingLog(RedisStore& store, const std::string& prefix,
                      std::vector<std::string>* keys) {
  static const Policy p = Policy::SlidingWindowLog("l", 20, std::chrono::minutes(1));
  const std::string key = prefix + "log";
  for (int i = 0; i < kSpillCalls; ++i) {
    const StoreCheck check{.policy = &p, .key = key};
    Decision d;
    ASSERT_TRUE(store.Run({.checks = {&check, 1}, .now = 0}, {&d, 1}).ok());
    EXPECT_TRUE(d.allowed);
  }
  keys->push_back(key);
  keys->push_back(key + ":log");
}

// A concurrency limit's permit set on key `prefix` + "jobs", moved through every
// operation by `store` (caller time, so that a lease ends without waiting): permits a,
// b and c acquired, a and b extended, b released, then, as c's lease ends, d acquired,
// which drops c from the set (a trim takes a permit whose expiry is now) and leaves a
// and d. Adds the set's key to `keys`.
void MovePermits(RedisStore& store, const std::string& prefix, std::vector<std::string>* keys) {
  static const Policy p = Policy::Concurrency("jobs", 4, std::chrono::minutes(1));
  const std::string key = prefix + "jobs";
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c'), d(32, 'd');
  const Micros t0 = 1'785'000'000'000'000, minute = 60'000'000;
  const struct {
    Micros at;
    StoreOp op;
    const std::string* permit;
  } steps[] = {{t0, StoreOp::kDecide, &a},
               {t0, StoreOp::kDecide, &b},
               {t0 + 1, StoreOp::kDecide, &c},
               {t0 + minute / 2, StoreOp::kExtend, &a},
               {t0 + minute / 2, StoreOp::kExtend, &b},
               {t0 + minute / 2 + 1, StoreOp::kRelease, &b},
               {t0 + minute + 1, StoreOp::kDecide, &d}};
  for (const auto& st : steps) {
    const StoreCheck check{.policy = &p, .key = key, .cost = 1, .permit = *st.permit};
    Decision out;
    ASSERT_TRUE(store.Run({.op = st.op, .checks = {&check, 1}, .now = st.at}, {&out, 1}).ok());
    EXPECT_TRUE(out.allowed) << "at +" << st.at - t0;
  }
  keys->push_back(key);
}

class ModuleReplication : public OnServer {
 protected:
  // A primary and its replica, both with the module, once the replica's link is up.
  void StartWithReplica() {
    auto p = StartWithModule();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    primary = std::move(*p);
    auto r = StartWithModule({"--replicaof", "127.0.0.1", std::to_string(primary->port())});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    replica = std::move(*r);
    ASSERT_TRUE(WaitUntil([&] {
      auto info = replica->Command({"INFO", "replication"});
      return info.ok() && info->str.find("master_link_status:up") != std::string::npos;
    }));
  }
  std::unique_ptr<RedisServer> primary, replica;
};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleReplication, kEveryServer, ServerName);

// A replica (with the module loaded too, so that it could decide if it were sent the
// command) gets the module's writes as SET ... PXAT (a sliding log's sorted set and a
// permit set as the script's own ZADD, ZREM, ZREMRANGEBYSCORE and PEXPIRE): the same
// values and TTLs, and it never runs SLUICE.DECIDE itself.
TEST_P(ModuleReplication, ReplicaGetsTheEffectsNotTheCommand) {
  ASSERT_NO_FATAL_FAILURE(StartWithReplica());
  auto store = Open(primary->Url(), /*caller_time=*/false);
  auto timed = Open(primary->Url(), /*caller_time=*/true);
  ASSERT_TRUE(store && timed);
  std::vector<std::string> keys;
  ASSERT_NO_FATAL_FAILURE(DecideEachAlgorithmThrice(*store, "repl:", &keys));
  ASSERT_NO_FATAL_FAILURE(SpillASlidingLog(*store, "repl:", &keys));
  ASSERT_NO_FATAL_FAILURE(MovePermits(*timed, "repl:", &keys));
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(*primary, *replica));
  EXPECT_EQ(Contents(*primary, "repl:log:log").rfind("zset|", 0), 0u);
  EXPECT_EQ(Contents(*primary, "repl:jobs"), "zset|" + std::string(32, 'a') + "|1785000090000000|" +
                                                 std::string(32, 'd') + "|1785000120000001");
  for (const std::string& k : keys) {
    const std::string a = Contents(*primary, k), b = Contents(*replica, k);
    EXPECT_NE(a, "none") << k;
    EXPECT_EQ(a, b) << k;
    auto ttl = replica->Command({"PTTL", k});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k;
  }
  EXPECT_EQ(ModuleCalls(*primary), 3 + kSpillCalls + 7);
  EXPECT_EQ(ModuleCalls(*replica), 0);
  EXPECT_GT(replica->CommandCalls("set"), 0);
}

// A malformed call that names one key as a permit set and as a fixed window's state: the
// permit's commit makes it a sorted set, so the window's write is refused on the primary,
// and the replica must not get it either (it would hold a string where the primary holds
// the set).
TEST_P(ModuleReplication, AWriteThePrimaryRefusesIsNotReplicated) {
  ASSERT_NO_FATAL_FAILURE(StartWithReplica());
  auto r =
      primary->Command({"SLUICE.DECIDE", "2", "k", "k", "3", "", "0", "2", "5,3,60000000,3,-1",
                        "0,100,60000000,100,-1", "0,4,1,0,0:" + std::string(32, 'a'), "1,0,1,0,1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(*primary, *replica));
  EXPECT_EQ(Contents(*primary, "k").rfind("zset|", 0), 0u) << Contents(*primary, "k");
  EXPECT_EQ(Contents(*replica, "k"), Contents(*primary, "k"));
}

// The AOF gets the same effects as the replicas: reloading it (DEBUG LOADAOF: the
// dataset emptied and rebuilt from the file) gives back every value and its absolute
// expiry, those whose TTL a write kept (SET ... KEEPTTL) and a permit set's included.
TEST_P(ModuleReplication, AofReplaysTheEffects) {
  auto server = StartWithModule(
      {"--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), /*caller_time=*/false);
  auto timed = Open((*server)->Url(), /*caller_time=*/true);
  ASSERT_TRUE(store && timed);
  std::vector<std::string> keys;
  ASSERT_NO_FATAL_FAILURE(DecideEachAlgorithmThrice(*store, "aof:", &keys));
  ASSERT_NO_FATAL_FAILURE(SpillASlidingLog(*store, "aof:", &keys));
  ASSERT_NO_FATAL_FAILURE(MovePermits(*timed, "aof:", &keys));
  ASSERT_EQ(ModuleCalls(**server), 3 + kSpillCalls + 7);
  auto snapshot = [&] {
    std::vector<std::pair<std::string, long long>> out;
    for (const std::string& k : keys) {
      auto at = (*server)->Command({"PEXPIRETIME", k});
      EXPECT_TRUE(at.ok()) << k;
      out.emplace_back(Contents(**server, k), at.ok() ? at->integer : 0);
    }
    return out;
  };
  const auto before = snapshot();
  EXPECT_EQ(Contents(**server, "aof:log:log").rfind("zset|", 0), 0u);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_NE(before[i].first, "none") << keys[i];
    EXPECT_GT(before[i].second, 0) << keys[i] << " has no expiry";
  }
  auto reload = (*server)->Command({"DEBUG", "LOADAOF"});
  ASSERT_TRUE(reload.ok() && !reload->is_error()) << (reload.ok() ? reload->str : "");
  const auto after = snapshot();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first) << keys[i];
    EXPECT_EQ(after[i].second, before[i].second) << keys[i];
  }
}

}  // namespace
}  // namespace sluice::testing
