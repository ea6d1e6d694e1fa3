// The native Redis module (src/redis/module, docs/redis.md "The native module") on real
// redis-servers started with --loadmodule: the same random sequences decided by the Lua
// scripts and by the module must give identical decisions; a keyspace moves between
// them live; the module replicates its effects (not the command); RedisStore detects
// it, `module=off` forces Lua, and a module that goes away hands over to Lua within the
// call; every key it writes has a TTL. On Redis 7.0 and on Valkey 8 (OnServer below).
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <sstream>

#include "burst.h"
#include "edge_policies.h"
#include "many_processes.h"
#include "redis/module/request.h"
#include "redis_cluster.h"
#include "redis_sentinel.h"
#include "redis_server.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::testing {
namespace {

// `binary` (redis-server or valkey-server) with the module loaded.
Result<std::unique_ptr<RedisServer>> StartServerWithModule(const std::string& binary,
                                                           std::vector<std::string> extra = {}) {
  RedisServerOptions o;
  o.binary = binary;
  o.args = {"--loadmodule", SLUICE_REDIS_MODULE};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return RedisServer::Start(std::move(o));
}

// The servers the module's tests run on, each test once on each (the cluster and
// sentinel tests below: Redis only): Debian 12's Redis 7.0 and Valkey 8 (from
// bookworm-backports, unpacked by scripts/deps.sh). A server that is missing fails its
// tests, as it does everywhere.
class OnServer : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& Binary() const { return GetParam(); }
  // The server with the module loaded; it must say it is the one asked for (Valkey's
  // INFO has a valkey_version, Redis's none).
  Result<std::unique_ptr<RedisServer>> StartWithModule(std::vector<std::string> extra = {}) const {
    auto server = StartServerWithModule(GetParam(), std::move(extra));
    if (server.ok()) {
      auto info = (*server)->Command({"INFO", "server"});
      EXPECT_TRUE(info.ok());
      if (info.ok()) {
        EXPECT_EQ(info->str.find("valkey_version:") != std::string::npos,
                  GetParam() == "valkey-server")
            << GetParam() << ": " << info->str.substr(0, 200);
      }
    }
    return server;
  }
};

std::string ServerName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "valkey-server" ? "Valkey" : "Redis";
}

const auto kEveryServer =
    ::testing::Values(std::string("redis-server"), std::string("valkey-server"));

std::shared_ptr<RedisStore> Open(const std::string& url, bool caller_time = true) {
  auto s = RedisStore::Create(
      {.url = url, .call_timeout = kPatientCallTimeout, .use_caller_time = caller_time});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

Policy RandomPolicy(std::mt19937_64& rng, int index) {
  // (the sliding log with limits above its inline form's 8 entries too: its sorted set,
  // the spill into it, and the denials that search it)
  static const Algorithm kAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindowLog,
                                          Algorithm::kSlidingWindowCounter, Algorithm::kTokenBucket,
                                          Algorithm::kGcra};
  static const Micros kWindows[] = {1'000, 7'000, 250'000, 1'000'000, 60'000'000, 3'600'000'000};
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100, 1000};
  Policy p;
  p.name = "p" + std::to_string(index);
  p.algorithm = kAlgorithms[rng() % std::size(kAlgorithms)];
  p.limit = kLimits[rng() % std::size(kLimits)];
  p.window = kWindows[rng() % std::size(kWindows)];
  if (p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) {
    if (rng() % 2) p.burst = p.limit + rng() % (2 * p.limit + 1);
    if (p.algorithm == Algorithm::kTokenBucket && rng() % 3 == 0) {
      p.initial_tokens = rng() % (p.Capacity() + 1);
    }
  }
  // A third with a block (its own key, state key + ":b"): a denial or a penalty over the
  // limit blocks the key for one to three windows.
  if (rng() % 3 == 0) p.block_for = p.window * static_cast<Micros>(1 + rng() % 3);
  // A third with on_change (its states recorded with its parameters; not the log's).
  if (rng() % 3 == 0 && p.algorithm != Algorithm::kSlidingWindowLog) {
    p.on_change = rng() % 2 ? OnChange::kReset : OnChange::kProportional;
  }
  // A quarter whose denied decisions are charged (Policy::overage), into a debt of one
  // capacity or of a random bound (a sliding log's at most its limit).
  if (rng() % 4 == 0) {
    p.overage = rng() % 2 ? Overage::kCharge : Overage::kDrain;
    if (p.overage == Overage::kCharge && rng() % 2) p.max_debt = 1 + rng() % (3 * p.Capacity());
    if (p.algorithm == Algorithm::kSlidingWindowLog) p.max_debt = std::min(p.max_debt, p.limit);
  }
  EXPECT_TRUE(ValidatePolicy(p).ok());
  return p;
}

// Four versions of one policy, as reloads would make them (`base` first): the same
// algorithm and name, other limits, bursts, windows and on_change modes, one key
// space (Policy::on_change decides what a state recorded under another version is).
std::vector<Policy> Versions(std::mt19937_64& rng, const Policy& base) {
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100};
  static const OnChange kModes[] = {OnChange::kAsIs, OnChange::kReset, OnChange::kProportional};
  std::vector<Policy> out = {base};
  for (int i = 1; i < 4; ++i) {
    Policy v = base;
    v.limit = kLimits[rng() % std::size(kLimits)];
    if (rng() % 3 == 0) v.window = base.window * 2;
    v.burst = 0;
    v.initial_tokens.reset();
    if ((v.algorithm == Algorithm::kTokenBucket || v.algorithm == Algorithm::kGcra) && rng() % 2) {
      v.burst = v.limit + rng() % (2 * v.limit + 1);
    }
    v.on_change = kModes[rng() % std::size(kModes)];
    if (v.algorithm == Algorithm::kSlidingWindowLog) v.on_change = OnChange::kAsIs;
    EXPECT_TRUE(ValidatePolicy(v).ok());
    out.push_back(v);
  }
  return out;
}

std::string Describe(const Decision& d) {
  std::ostringstream o;
  o << "allowed=" << d.allowed << " remaining=" << d.remaining << " reset=" << d.reset_after
    << " retry=" << d.retry_after << " wait=" << d.wait << " charged=" << d.charged;
  return o.str();
}

bool Same(const Decision& a, const Decision& b) {
  return a.allowed == b.allowed && a.remaining == b.remaining && a.reset_after == b.reset_after &&
         a.retry_after == b.retry_after && a.wait == b.wait && a.limit == b.limit &&
         a.charged == b.charged;
}

// One random step: an operation and 1-3 checks on distinct keys of `keys`.
struct Step {
  StoreOp op = StoreOp::kDecide;
  std::vector<StoreCheck> checks;  // keys unset: see `keys`
  std::vector<int> keys;           // the key of each check: "k<policy * 100 + n>"
  Micros now = 0;
};

// `wide`: the clock may also go back a little, and idle for up to an hour; otherwise
// it only moves forward, by under 0.3 s (against the in-process store, which raises its
// clock to the latest time it saw, and forgets a state when it is full again, where
// Redis keeps a key for its TTL padded by an hour of ITS clock in caller-time mode: a
// fixed window's counter more than 2^19 windows old would read as a later window's).
Step RandomStep(std::mt19937_64& rng, const std::vector<Policy>& policies, Micros* now, bool wide) {
  Step s;
  switch (rng() % 10) {
    case 0:
      if (wide) *now -= static_cast<Micros>(rng() % 5'000);
      break;
    case 1:
      if (wide) *now += static_cast<Micros>(rng() % 4'000'000'000ULL);  // a long idle gap
      break;
    default:
      *now += static_cast<Micros>(rng() % 300'000);
  }
  s.now = *now;
  const int kind = static_cast<int>(rng() % 10);
  s.op = kind == 0 ? StoreOp::kRefund : kind == 1 ? StoreOp::kPenalize : StoreOp::kDecide;
  const std::size_t n = 1 + rng() % 3;
  std::vector<int> keys = {0, 1, 2, 3, 4, 5};
  std::shuffle(keys.begin(), keys.end(), rng);
  for (std::size_t i = 0; i < n; ++i) {
    // (a key is one policy's: the Limiter names keys by policy)
    const std::size_t pi = rng() % policies.size();
    const Policy& p = policies[pi];
    StoreCheck c;
    c.policy = &p;
    const std::uint64_t cap = p.Capacity();
    c.cost = rng() % 6 == 0 ? 0 : rng() % 4 == 0 ? 1 + rng() % cap : 1;
    // (under an overage a decision may report more than the capacity: denied, charged)
    if (p.overage != Overage::kReject && s.op == StoreOp::kDecide && rng() % 8 == 0) {
      c.cost = cap + 1 + rng() % (2 * cap);
    }
    if (s.op != StoreOp::kDecide && c.cost == 0) c.cost = 1;
    if (s.op == StoreOp::kDecide && p.overage == Overage::kReject && rng() % 5 == 0) {
      c.max_wait = rng() % (p.window + 1);  // (a reservation that waits needs reject)
    }
    s.keys.push_back(static_cast<int>(pi) * 100 + keys[i]);
    s.checks.push_back(c);
  }
  return s;
}

// The checks of `s` on keys prefixed with `prefix` (`storage` keeps the keys).
std::vector<StoreCheck> Prefixed(const Step& s, const std::string& prefix,
                                 std::vector<std::string>* storage) {
  storage->clear();
  storage->reserve(s.checks.size());
  std::vector<StoreCheck> out = s.checks;
  for (std::size_t i = 0; i < out.size(); ++i) {
    storage->push_back(prefix + "k" + std::to_string(s.keys[i]));
    out[i].key = storage->back();
  }
  return out;
}

Status RunOn(Store& store, StoreOp op, std::span<const StoreCheck> checks, Micros now,
             Decision* out) {
  const std::size_t n = op == StoreOp::kRefund ? 0 : checks.size();
  return store.Run({.op = op, .checks = checks, .now = now}, std::span<Decision>(out, n));
}

// Every key on `server` has a TTL.
void ExpectEveryKeyHasTtl(const RedisServer& server) {
  auto keys = server.Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  for (const redis::Reply& k : keys->elements) {
    auto ttl = server.Command({"PTTL", k.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << "key " << k.str << " has no TTL";
  }
}

// What `key` holds, whatever its type (a sliding log's ":log" key is a sorted set: its
// members and scores in order), with the type first ("none" when there is no key).
std::string Contents(const RedisServer& server, const std::string& key) {
  auto type = server.Command({"TYPE", key});
  EXPECT_TRUE(type.ok());
  if (!type.ok()) return "";
  std::string out = type->str;
  if (type->str == "zset") {
    auto z = server.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    EXPECT_TRUE(z.ok());
    for (const redis::Reply& e : z.ok() ? z->elements : std::vector<redis::Reply>{}) {
      out += "|" + e.str;
    }
  } else if (type->str == "string") {
    out += "|" + server.Command({"GET", key})->str;
  }
  return out;
}

// Waits until `replica` has applied everything `primary` has written so far (WAIT would
// count only the writes of its own connection).
void WaitReplicated(const RedisServer& primary, const RedisServer& replica) {
  auto offset = [](const RedisServer& server, const std::string& field) {
    auto info = server.Command({"INFO", "replication"});
    if (!info.ok()) return -1LL;
    const std::size_t at = info->str.find(field + ":");
    return at == std::string::npos ? -1LL : std::stoll(info->str.substr(at + field.size() + 1));
  };
  const long long written = offset(primary, "master_repl_offset");
  ASSERT_GT(written, 0);
  ASSERT_TRUE(WaitUntil([&] { return offset(replica, "slave_repl_offset") >= written; },
                        std::chrono::seconds(60)));
}

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
  EXPECT_GT(server.CommandCalls("sluice.decide"), 0);
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
  EXPECT_GT(server->CommandCalls("sluice.decide"), 0);
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
  const long long before = server->CommandCalls("sluice.decide");
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
  EXPECT_EQ(server->CommandCalls("sluice.decide") - before, std::size(steps));
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
  const long long before = server->CommandCalls("sluice.decide");
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
  EXPECT_GE(server->CommandCalls("sluice.decide") - before, 4) << "the module took the penalties";
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

class ModuleReplication : public OnServer {};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleReplication, kEveryServer, ServerName);

// A replica (with the module loaded too, so that it could decide if it were sent the
// command) gets the module's writes as SET ... PXAT (a sliding log's sorted set as the
// script's own ZADD and PEXPIRE): the same values and TTLs, and it never runs
// SLUICE.DECIDE itself.
TEST_P(ModuleReplication, ReplicaGetsTheEffectsNotTheCommand) {
  auto primary = StartWithModule();
  ASSERT_TRUE(primary.ok()) << primary.status().ToString();
  auto replica = StartWithModule({"--replicaof", "127.0.0.1", std::to_string((*primary)->port())});
  ASSERT_TRUE(replica.ok()) << replica.status().ToString();
  ASSERT_TRUE(WaitUntil([&] {
    auto info = (*replica)->Command({"INFO", "replication"});
    return info.ok() && info->str.find("master_link_status:up") != std::string::npos;
  }));
  auto store = Open((*primary)->Url(), /*caller_time=*/false);
  ASSERT_TRUE(store);
  std::vector<std::string> keys;
  ASSERT_NO_FATAL_FAILURE(DecideEachAlgorithmThrice(*store, "repl:", &keys));
  ASSERT_NO_FATAL_FAILURE(SpillASlidingLog(*store, "repl:", &keys));
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(**primary, **replica));
  EXPECT_EQ(Contents(**primary, "repl:log:log").rfind("zset|", 0), 0u);
  for (const std::string& k : keys) {
    const std::string a = Contents(**primary, k), b = Contents(**replica, k);
    EXPECT_NE(a, "none") << k;
    EXPECT_EQ(a, b) << k;
    auto ttl = (*replica)->Command({"PTTL", k});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k;
  }
  EXPECT_EQ((*primary)->CommandCalls("sluice.decide"), 3 + kSpillCalls);
  EXPECT_EQ((*replica)->CommandCalls("sluice.decide"), 0);
  EXPECT_GT((*replica)->CommandCalls("set"), 0);
}

// The AOF gets the same effects as the replicas: reloading it (DEBUG LOADAOF: the
// dataset emptied and rebuilt from the file) gives back every value and its absolute
// expiry, those whose TTL a write kept (SET ... KEEPTTL) included.
TEST_P(ModuleReplication, AofReplaysTheEffects) {
  auto server = StartWithModule(
      {"--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), /*caller_time=*/false);
  ASSERT_TRUE(store);
  std::vector<std::string> keys;
  ASSERT_NO_FATAL_FAILURE(DecideEachAlgorithmThrice(*store, "aof:", &keys));
  ASSERT_NO_FATAL_FAILURE(SpillASlidingLog(*store, "aof:", &keys));
  ASSERT_EQ((*server)->CommandCalls("sluice.decide"), 3 + kSpillCalls);
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

class ModuleStore : public OnServer {};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleStore, kEveryServer, ServerName);

// Detection at connect: a server with the module decides through it; module=off and a
// server without it decide through the scripts, with the same answers.
TEST_P(ModuleStore, DetectedAtConnectAndModuleOffForcesLua) {
  auto with = StartWithModule();
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  RedisServerOptions plain;
  plain.binary = Binary();
  auto without = RedisServer::Start(plain);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  const Policy p = Policy::FixedWindow("api", 3, std::chrono::minutes(1));
  struct Case {
    const RedisServer* server;
    std::string url;
    bool module;
  } cases[] = {{with->get(), (*with)->Url(), true},
               {with->get(), (*with)->Url() + "?module=off", false},
               {without->get(), (*without)->Url(), false}};
  int n = 0;
  for (const Case& c : cases) {
    auto store = Open(c.url, false);
    ASSERT_TRUE(store);
    const std::string key = "detect:" + std::to_string(n++);
    const long long module0 = c.server->CommandCalls("sluice.decide");
    const long long lua0 = c.server->CommandCalls("evalsha");
    for (int i = 0; i < 4; ++i) {
      const StoreCheck check{.policy = &p, .key = key};
      Decision d;
      ASSERT_TRUE(store->Run({.checks = {&check, 1}, .now = 0}, {&d, 1}).ok());
      EXPECT_EQ(d.allowed, i < 3) << c.url << " decision " << i;
    }
    EXPECT_EQ(c.server->CommandCalls("sluice.decide") - module0, c.module ? 4 : 0) << c.url;
    EXPECT_EQ(c.server->CommandCalls("evalsha") - lua0, c.module ? 0 : 4) << c.url;
  }
}

// The module goes away under a connected store (MODULE UNLOAD): the next call is
// answered by the scripts within its deadline, on the state the module wrote, and a
// reconnect's probe keeps the store on Lua.
TEST_P(ModuleStore, ModuleGoneHandsOverToLuaWithinTheCall) {
  auto server = StartWithModule({"--enable-module-command", "yes"});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), false);
  ASSERT_TRUE(store);
  const Policy p = Policy::FixedWindow("api", 5, std::chrono::minutes(1));
  const StoreCheck check{.policy = &p, .key = "gone"};
  auto decide = [&] {
    Decision d;
    const Status s = store->Run({.checks = {&check, 1}, .now = 0}, {&d, 1});
    EXPECT_TRUE(s.ok()) << s.ToString();
    return d.allowed;
  };
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(decide());
  EXPECT_EQ((*server)->CommandCalls("sluice.decide"), 3);
  auto unload = (*server)->Command({"MODULE", "UNLOAD", "sluice"});
  ASSERT_TRUE(unload.ok() && !unload->is_error()) << (unload.ok() ? unload->str : "");
  EXPECT_TRUE(decide());
  EXPECT_TRUE(decide());
  EXPECT_FALSE(decide());  // 5 of 5 used: the scripts counted the module's 3
  // A reconnect probes again: still no module, so the scripts decide.
  ASSERT_TRUE((*server)->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
  ASSERT_TRUE(WaitUntil([&] {
    Decision d;
    const StoreCheck peek{.policy = &p, .key = "gone", .cost = 0};
    return store->Run({.checks = {&peek, 1}, .now = 0}, {&d, 1}).ok();
  }));
  EXPECT_FALSE(decide());
  EXPECT_GE((*server)->CommandCalls("evalsha"), 4);
}

// Many callers at once: the connection merges their module calls into one command
// (coalescing), and the limit is exact.
TEST_P(ModuleStore, CoalescedCallsAreExact) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto s = RedisStore::Create(
      {.url = (*server)->Url(), .call_timeout = kPatientCallTimeout, .connections = 1});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto store = *s;
  const long long lua0 = (*server)->CommandCalls("evalsha");  // (Create's EVALSHA permission probe)
  const Policy p = Policy::Gcra("api", 100, std::chrono::hours(1), 100);
  constexpr int kCalls = 400;
  std::atomic<int> allowed{0}, done{0}, failed{0};
  const StoreCheck check{.policy = &p, .key = "merged"};
  for (int i = 0; i < kCalls; ++i) {
    store->RunAsync({.checks = {&check, 1}, .now = 0},
                    [&](const Status& st, std::span<const Decision> d) {
                      if (!st.ok()) failed.fetch_add(1);
                      if (st.ok() && d[0].allowed) allowed.fetch_add(1);
                      done.fetch_add(1);
                    });
  }
  ASSERT_TRUE(WaitUntil([&] { return done.load() == kCalls; }));
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(allowed.load(), 100);
  EXPECT_GT(store->Stats().coalesced_calls, 0u);
  EXPECT_LT((*server)->CommandCalls("sluice.decide"), kCalls);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), lua0);
}

// Queues one fresh check of `a` and one of `b` (doing `b_op`) together (Burst) on a
// one-connection store over a server with the module, and expects them to share one
// SLUICE.DECIDE, the decision allowed and a penalty's cost taken.
void ExpectOneMergedCommand(const std::string& binary, const Policy& a, const Policy& b,
                            StoreOp b_op = StoreOp::kDecide) {
  auto server = StartServerWithModule(binary);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto s = RedisStore::Create(
      {.url = (*server)->Url(), .call_timeout = kPatientCallTimeout, .connections = 1});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string keys[2] = {"sluice:{merge0}:" + a.name, "sluice:{merge1}:" + b.name};
  std::vector<Group> groups(2);
  groups[0].checks = {StoreCheck{.policy = &a, .key = keys[0]}};
  groups[1].checks = {StoreCheck{.policy = &b, .key = keys[1]}};
  groups[1].op = b_op;
  const long long before = (*server)->CommandCalls("sluice.decide");
  const std::vector<Outcome> got = Burst(**s, a, groups, 0);
  for (const Outcome& o : got) {
    ASSERT_TRUE(o.status.ok()) << o.status.ToString();
    ASSERT_EQ(o.decisions.size(), 1u);
  }
  EXPECT_TRUE(got[0].decisions[0].allowed);
  EXPECT_EQ((*s)->Stats().coalesced_calls, 1u);
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - before, 2)
      << "the trigger's and the merged one";
  // What the merged call left on b's key: one unit taken, by the decision or the penalty.
  Decision peek;
  const StoreCheck look{.policy = &b, .key = keys[1], .cost = 0};
  ASSERT_TRUE((*s)->Run({.checks = {&look, 1}, .now = 0}, {&peek, 1}).ok());
  EXPECT_EQ(peek.remaining, b.Capacity() - 1);
}

// Two module calls queued together already share one command: a merged SLUICE.DECIDE
// has no fixed cost to outweigh what it saves, unlike the coalesced script (which waits
// for kMinCoalescedBatches), so sluiced's few callers at a time coalesce too.
TEST_P(ModuleStore, TwoQueuedCallsShareOneCommand) {
  const Policy p = Policy::Gcra("gcra", 5, std::chrono::hours(1), 5);
  ExpectOneMergedCommand(Binary(), p, p);
}

// Module calls share one command whatever their scripts would have been: a plain fixed
// window (the lean script's lane) and a GCRA (the coalesced script's) queued together
// are one SLUICE.DECIDE.
TEST_P(ModuleStore, CallsOfEveryAlgorithmShareOneCommand) {
  ExpectOneMergedCommand(Binary(), Policy::FixedWindow("fw", 5, std::chrono::hours(1)),
                         Policy::Gcra("gcra", 5, std::chrono::hours(1), 5));
}

// ... and a sliding log's (the lean sliding-log script's lane, two keys a check) with a
// fixed window's, a penalty of a sliding log with a decision of another.
TEST_P(ModuleStore, SlidingLogCallsShareOneCommand) {
  const Policy log = Policy::SlidingWindowLog("log", 5, std::chrono::hours(1));
  ExpectOneMergedCommand(Binary(), Policy::FixedWindow("fw", 5, std::chrono::hours(1)), log);
  ExpectOneMergedCommand(Binary(), Policy::SlidingWindowLog("log2", 9, std::chrono::hours(1)), log,
                         StoreOp::kPenalize);
}

// Exactness under concurrency with the module (many_processes.h): 4 processes x 8
// threads on one key per algorithm never get more than each algorithm allows, every
// algorithm but concurrency decided by the module (its calls counted).
TEST_P(ModuleStore, ManyProcessesAndThreadsNeverExceedTheLimit) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ExpectManyProcessesWithinTheLimit((*server)->Url());
  EXPECT_GT((*server)->CommandCalls("sluice.decide"), 1000);
}

// A policy with block_for is decided by the module, its block in the key the scripts
// keep it in (state key + ":b", its end in us, a TTL to then): the same decisions as the
// in-process store through a denial that starts the block, a later window still
// blocked, a penalty that starts a block again once it ended, and no script call.
TEST_P(ModuleStore, BlocksAreDecidedByTheModule) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url());
  ASSERT_NE(store, nullptr);
  MemoryStore memory;
  Policy p = Policy::FixedWindow("login", 3, std::chrono::minutes(1));
  p.block_for = 10 * 60'000'000LL;
  const std::string key = "sluice:{u1}:login";
  const Micros t0 = 1'785'000'000'000'000;  // (on a minute boundary)
  const long long scripts = (*server)->CommandCalls("evalsha");
  const long long module_calls = (*server)->CommandCalls("sluice.decide");
  struct Step {
    Micros at;
    StoreOp op;
    std::uint64_t cost;
  } steps[] = {
      {t0, StoreOp::kDecide, 1},
      {t0 + 1, StoreOp::kDecide, 1},
      {t0 + 2, StoreOp::kDecide, 1},
      {t0 + 3, StoreOp::kDecide, 1},              // denied: blocked
      {t0 + 4, StoreOp::kDecide, 0},              // a peek: blocked
      {t0 + 120'000'000, StoreOp::kDecide, 1},    // a later window, still blocked
      {t0 + 660'000'000, StoreOp::kDecide, 1},    // the block is over
      {t0 + 660'000'001, StoreOp::kPenalize, 3},  // over the limit: blocked again
      {t0 + 660'000'002, StoreOp::kDecide, 0},
  };
  int blocked = 0;
  for (const Step& st : steps) {
    const StoreCheck c{.policy = &p, .key = key, .cost = st.cost};
    Decision want, got;
    ASSERT_TRUE(memory.Run({.op = st.op, .checks = {&c, 1}, .now = st.at}, {&want, 1}).ok());
    ASSERT_TRUE(store->Run({.op = st.op, .checks = {&c, 1}, .now = st.at}, {&got, 1}).ok());
    EXPECT_TRUE(Same(want, got)) << "at +" << st.at - t0 << " us\n  memory: " << Describe(want)
                                 << "\n  module: " << Describe(got);
    if (!got.allowed && got.retry_after > 60'000'000) ++blocked;
  }
  EXPECT_GE(blocked, 4);
  auto until = (*server)->Command({"GET", key + ":b"});
  ASSERT_TRUE(until.ok());
  EXPECT_EQ(until->str, std::to_string(t0 + 660'000'001 + p.block_for));
  ExpectEveryKeyHasTtl(**server);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), scripts) << "no script decided";
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - module_calls, std::size(steps));
}

// Overage (Policy::overage) is decided by the module: a decision that does not fit, a
// usage report beyond the capacity, and a check that fits in a group another check
// denies are each charged per their rule (a debt bounded at max_debt; drain: what
// remains), answered denied with the units taken, a blocked key staying blocked. The
// same decisions as the in-process store, and no script call.
TEST_P(ModuleStore, OverageChargesAreDecidedByTheModule) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url());
  ASSERT_NE(store, nullptr);
  MemoryStore memory;
  Policy tokens = Policy::TokenBucket("tokens", 100, 100, std::chrono::minutes(1));
  tokens.overage = Overage::kCharge;
  tokens.max_debt = 50;
  Policy calls = Policy::FixedWindow("calls", 3, std::chrono::minutes(1));
  calls.overage = Overage::kDrain;
  calls.block_for = 10 * 60'000'000LL;
  ASSERT_TRUE(ValidatePolicy(tokens).ok() && ValidatePolicy(calls).ok());
  const Micros t0 = 1'785'000'000'000'000;  // (on a minute boundary)
  const long long scripts = (*server)->CommandCalls("evalsha");
  const long long module_calls = (*server)->CommandCalls("sluice.decide");
  struct Step {
    Micros at;
    std::uint64_t tokens, calls;  // each check's cost (0: no such check)
    std::uint64_t charged;        // the units all its checks take by their overage
  } steps[] = {
      {t0, 80, 0, 0},               // allowed: 20 tokens left
      {t0 + 1, 60, 0, 60},          // denied, charged: 40 in debt
      {t0 + 2, 500, 0, 10},         // a report beyond the capacity: charged up to the debt of 50
      {t0 + 3, 0, 2, 0},            // allowed
      {t0 + 4, 0, 2, 1},            // denied, drained (the 1 left), blocked
      {t0 + 60'000'000, 0, 1, 1},   // a later window, still blocked: drained
      {t0 + 120'000'000, 5, 1, 6},  // the tokens fit, the group is denied: 5 charged, 1 drained
  };
  for (const Step& st : steps) {
    StoreCheck checks[2];
    std::size_t n = 0;
    if (st.tokens > 0) {
      checks[n++] = {.policy = &tokens, .key = "sluice:{u1}:tokens", .cost = st.tokens};
    }
    if (st.calls > 0) {
      checks[n++] = {.policy = &calls, .key = "sluice:{u1}:calls", .cost = st.calls};
    }
    Decision want[2], got[2];
    ASSERT_TRUE(
        memory.Run({.op = StoreOp::kDecide, .checks = {checks, n}, .now = st.at}, {want, n}).ok());
    ASSERT_TRUE(
        store->Run({.op = StoreOp::kDecide, .checks = {checks, n}, .now = st.at}, {got, n}).ok());
    std::uint64_t charged = 0;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(Same(want[i], got[i]))
          << "at +" << st.at - t0 << " us, check " << i << "\n  memory: " << Describe(want[i])
          << "\n  module: " << Describe(got[i]);
      charged += got[i].charged;
      if (st.charged > 0) {
        EXPECT_FALSE(got[i].allowed);
      }
    }
    EXPECT_EQ(charged, st.charged) << "at +" << st.at - t0 << " us";
  }
  ExpectEveryKeyHasTtl(**server);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), scripts) << "no script decided";
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - module_calls, std::size(steps));
}

// Usage reservations (StoreCheck::usage_id) and their settles are decided by the
// module: a reservation records what it took (its cost, or what its overage charged
// when denied); a settle above it decides the rest (charged when it does not fit),
// below it refunds the difference, and a second settle, an unknown id or an expired
// record change nothing. The same decisions and errors as the in-process store, and no
// script call.
TEST_P(ModuleStore, UsageReservationsAndSettlesAreDecidedByTheModule) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url());
  ASSERT_NE(store, nullptr);
  MemoryStore memory;
  Policy tokens = Policy::TokenBucket("tokens", 100, 100, std::chrono::minutes(1));
  tokens.overage = Overage::kCharge;
  tokens.max_debt = 50;
  const std::string key = "sluice:{u1}:tokens";
  const Micros t0 = 1'785'000'000'000'000;
  const long long scripts = (*server)->CommandCalls("evalsha");
  const long long module_calls = (*server)->CommandCalls("sluice.decide");
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c'), d(32, 'd'), e(32, 'e');
  struct Step {
    Micros at;
    StoreOp op;
    const std::string* id;
    std::uint64_t cost;
    Micros keep;  // a reservation's record lifetime
    ErrorCode code;
    std::uint64_t charged;
  } steps[] = {
      {t0, StoreOp::kDecide, &a, 30, 3'600'000'000, ErrorCode::kOk, 0},  // 70 left
      {t0 + 1, StoreOp::kSettle, &a, 50, 0, ErrorCode::kOk, 0},          // 20 more decided: 50 left
      {t0 + 2, StoreOp::kSettle, &a, 50, 0, ErrorCode::kOk, 0},          // settled already: a peek
      {t0 + 3, StoreOp::kDecide, &b, 40, 3'600'000'000, ErrorCode::kOk, 0},  // 10 left
      {t0 + 4, StoreOp::kSettle, &b, 10, 0, ErrorCode::kOk, 0},              // 30 refunded: 40 left
      {t0 + 5, StoreOp::kDecide, &c, 80, 3'600'000'000, ErrorCode::kOk, 80},  // charged: -40
      {t0 + 6, StoreOp::kSettle, &c, 200, 0, ErrorCode::kOk, 10},         // up to the debt of 50
      {t0 + 7, StoreOp::kSettle, &d, 5, 0, ErrorCode::kNotFound, 0},      // never reserved
      {t0 + 8, StoreOp::kDecide, &e, 0, 1'000, ErrorCode::kOk, 0},        // kept 1 ms
      {t0 + 9'000, StoreOp::kSettle, &e, 5, 0, ErrorCode::kNotFound, 0},  // expired
  };
  for (const Step& st : steps) {
    const StoreCheck check{
        .policy = &tokens, .key = key, .cost = st.cost, .usage_id = *st.id, .usage_ttl = st.keep};
    Decision want, got;
    const Status sw = memory.Run({.op = st.op, .checks = {&check, 1}, .now = st.at}, {&want, 1});
    const Status sg = store->Run({.op = st.op, .checks = {&check, 1}, .now = st.at}, {&got, 1});
    ASSERT_EQ(sw.code(), st.code) << "at +" << st.at - t0 << " us: " << sw.ToString();
    ASSERT_EQ(sg.code(), st.code) << "at +" << st.at - t0 << " us: " << sg.ToString();
    if (st.code != ErrorCode::kOk) {
      EXPECT_NE(sg.message().find(*st.id), std::string::npos) << sg.message();
      continue;
    }
    EXPECT_TRUE(Same(want, got)) << "at +" << st.at - t0 << " us\n  memory: " << Describe(want)
                                 << "\n  module: " << Describe(got);
    EXPECT_EQ(got.charged, st.charged) << "at +" << st.at - t0 << " us";
  }
  ExpectEveryKeyHasTtl(**server);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), scripts) << "no script decided";
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - module_calls, std::size(steps));
}

// Concurrency limits are decided by the module on the scripts' permit set: the same
// decisions as the scripts (module=off, on keys of their own in the same server)
// through acquires under two leases of one policy name, a peek, a denial at the limit,
// an extend and a release, the same permits and expiries in the set, and a TTL that a
// permit under the shorter lease never shortens; no script call from the module's store.
TEST_P(ModuleStore, ConcurrencyPermitsAreDecidedByTheModule) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto lua = Open((*server)->Url() + "?module=off");
  auto mod = Open((*server)->Url());
  ASSERT_TRUE(lua && mod);
  const Policy longer = Policy::Concurrency("jobs", 2, std::chrono::minutes(10));
  const Policy shorter = Policy::Concurrency("jobs", 2, std::chrono::minutes(1));
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c');
  const Micros t0 = 1'785'000'000'000'000;
  struct Step {
    Micros at;
    StoreOp op;
    const Policy* policy;
    const std::string* permit;  // null: a peek
    bool allowed;
  } steps[] = {
      {t0, StoreOp::kDecide, &longer, &a, true},
      {t0 + 1, StoreOp::kDecide, &shorter, &b, true},
      {t0 + 2, StoreOp::kDecide, &shorter, nullptr, false},  // a peek: no slot left
      {t0 + 3, StoreOp::kDecide, &shorter, &c, false},       // at the limit
      {t0 + 4, StoreOp::kExtend, &shorter, &b, true},
      {t0 + 5, StoreOp::kRelease, &shorter, &b, true},
      {t0 + 6, StoreOp::kRelease, &shorter, &b, false},  // released already
      {t0 + 7, StoreOp::kDecide, &shorter, &c, true},
  };
  const long long scripts = (*server)->CommandCalls("evalsha");
  const long long module_calls = (*server)->CommandCalls("sluice.decide");
  for (int store = 0; store < 2; ++store) {
    const std::string key = store == 0 ? "sluice:{lua}:jobs" : "sluice:{mod}:jobs";
    for (const Step& st : steps) {
      const StoreCheck check{.policy = st.policy,
                             .key = key,
                             .cost = st.permit != nullptr ? 1u : 0u,
                             .permit = st.permit != nullptr ? *st.permit : std::string_view()};
      Decision d;
      RedisStore& s = store == 0 ? *lua : *mod;
      ASSERT_TRUE(s.Run({.op = st.op, .checks = {&check, 1}, .now = st.at}, {&d, 1}).ok());
      EXPECT_EQ(d.allowed, st.allowed) << "store " << store << " at +" << st.at - t0;
    }
    if (store == 0) {
      EXPECT_EQ((*server)->CommandCalls("sluice.decide"), module_calls) << "module=off";
    }
  }
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - module_calls, std::size(steps));
  EXPECT_EQ((*server)->CommandCalls("evalsha") - scripts, std::size(steps)) << "the scripts' only";
  auto members = [&](const std::string& key) {
    auto r = (*server)->Command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    std::vector<std::string> out;
    if (r.ok()) {
      for (const redis::Reply& e : r->elements) out.push_back(e.str);
    }
    return out;
  };
  EXPECT_EQ(members("sluice:{mod}:jobs"), members("sluice:{lua}:jobs"));
  EXPECT_EQ(members("sluice:{mod}:jobs").size(), 4u) << "a and c held";
  // The set's TTL covers permit a's 10-minute lease (plus caller time's hour of pad), as
  // the scripts' does.
  auto pttl = [&](const std::string& key) {
    auto r = (*server)->Command({"PTTL", key});
    return r.ok() ? r->integer : -1;
  };
  EXPECT_GT(pttl("sluice:{mod}:jobs"), 3'600'000 + 9 * 60'000);
  EXPECT_NEAR(static_cast<double>(pttl("sluice:{mod}:jobs")),
              static_cast<double>(pttl("sluice:{lua}:jobs")), 30'000);
}

// So does a decision under an overage (on the scripts: the batch script's calls).
TEST_P(ModuleStore, AnOverageDecisionSharesOneCommand) {
  Policy b = Policy::TokenBucket("tokens", 50, 50, std::chrono::minutes(1));
  b.overage = Overage::kCharge;
  ExpectOneMergedCommand(Binary(), Policy::Gcra("gcra", 5, std::chrono::hours(1), 5), b);
}

// A sliding log is decided by the module, on both of its forms: the same decisions as
// the in-process store through its inline entries, the spill into its sorted set, a
// peek, a refund, a denial whose retry time is searched in the set and starts a block,
// a later window still blocked, and a penalty once the block ended; the scripts run
// nothing, and every key (the state, its ":log" set, the block) has a TTL.
TEST_P(ModuleStore, SlidingLogsAreDecidedByTheModule) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url());
  ASSERT_NE(store, nullptr);
  MemoryStore memory;
  Policy p = Policy::SlidingWindowLog("search", 12, std::chrono::minutes(1));
  p.block_for = 5 * 60'000'000LL;
  const std::string key = "sluice:{u1}:search";
  const Micros t0 = 1'785'000'000'000'000;
  const long long scripts = (*server)->CommandCalls("evalsha");
  const long long module_calls = (*server)->CommandCalls("sluice.decide");
  struct Step {
    Micros at;
    StoreOp op;
    std::uint64_t cost;
  } steps[] = {
      {t0 + 1'000, StoreOp::kDecide, 1},          {t0 + 2'000, StoreOp::kDecide, 1},
      {t0 + 3'000, StoreOp::kDecide, 1},          {t0 + 4'000, StoreOp::kDecide, 1},
      {t0 + 5'000, StoreOp::kDecide, 1},          {t0 + 6'000, StoreOp::kDecide, 1},
      {t0 + 7'000, StoreOp::kDecide, 1},          {t0 + 8'000, StoreOp::kDecide, 1},
      {t0 + 9'000, StoreOp::kDecide, 1},           // the ninth entry: into the sorted set
      {t0 + 10'000, StoreOp::kDecide, 0},          // a peek
      {t0 + 11'000, StoreOp::kRefund, 2},          // from the newest entries
      {t0 + 12'000, StoreOp::kDecide, 5},          // 12 of 12
      {t0 + 13'000, StoreOp::kDecide, 3},          // denied: its retry searched; blocked
      {t0 + 70'000'000, StoreOp::kDecide, 1},      // a later window, still blocked
      {t0 + 400'000'000, StoreOp::kDecide, 1},     // the block is over
      {t0 + 400'000'001, StoreOp::kPenalize, 12},  // at the limit: blocked again
      {t0 + 400'000'002, StoreOp::kDecide, 0},
  };
  int blocked = 0;
  for (const Step& st : steps) {
    const StoreCheck c{.policy = &p, .key = key, .cost = st.cost};
    const std::size_t n = st.op == StoreOp::kRefund ? 0 : 1;
    Decision want, got;
    ASSERT_TRUE(memory.Run({.op = st.op, .checks = {&c, 1}, .now = st.at}, {&want, n}).ok());
    ASSERT_TRUE(store->Run({.op = st.op, .checks = {&c, 1}, .now = st.at}, {&got, n}).ok());
    if (st.at == t0 + 9'000) {
      EXPECT_EQ(Contents(**server, key + ":log").rfind("zset|", 0), 0u) << "not spilled";
    }
    if (n == 0) continue;
    EXPECT_TRUE(Same(want, got)) << "at +" << st.at - t0 << " us\n  memory: " << Describe(want)
                                 << "\n  module: " << Describe(got);
    if (!got.allowed && got.retry_after >= 60'000'000) ++blocked;
  }
  EXPECT_GE(blocked, 3);
  ExpectEveryKeyHasTtl(**server);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), scripts) << "no script decided";
  EXPECT_EQ((*server)->CommandCalls("sluice.decide") - module_calls, std::size(steps));
}

// A penalty queued with a decision shares its command too (on the scripts it would share
// the batch script's calls only).
TEST_P(ModuleStore, APenaltyAndADecisionShareOneCommand) {
  const Policy p = Policy::Gcra("gcra", 5, std::chrono::hours(1), 5);
  ExpectOneMergedCommand(Binary(), p, p, StoreOp::kPenalize);
}

class ModuleCommand : public OnServer {};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleCommand, kEveryServer, ServerName);

// The command itself: a malformed call is an error naming what is wrong, and Redis
// stays up (PING); COMMAND GETKEYS reports the declared keys.
TEST_P(ModuleCommand, RejectsMalformedArgumentsAndDeclaresKeys) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::vector<std::vector<std::string>> bad = {
      {"SLUICE.DECIDE"},
      {"SLUICE.DECIDE", "x"},
      {"SLUICE.DECIDE", "2", "k"},
      {"SLUICE.DECIDE", "1", "k", "4", "", "0", "1", "0,10,1000000,10,-1", "0,0,1,0,1"},
      // a sliding log (layout 3) without its ":log" key
      {"SLUICE.DECIDE", "1", "k", "3", "", "0", "1", "1,10,1000000,10,-1", "0,0,1,0,1"},
      {"SLUICE.DECIDE", "1", "k", "2", "", "0", "1", "0,10,1000000,10,-1,5000", "0,0,1,0,1"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "1,10,1000000,10,-1", "0,0,1,0,1"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "0,10,1000000,10,-1", "0,0,11,0,1"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "0,10,1000000,10,-1", "0,0,1,0,0"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "0,10,1000000,10,-1", "0,9,1,0,1"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "0,10,-5,10,-1", "0,0,1,0,1"},
      {"SLUICE.DECIDE", "1", "k", "1", "", "0", "1", "0,99999999999999999999,1,10,-1", "0,0,1,0,1"},
  };
  for (const auto& args : bad) {
    auto r = (*server)->Command(args);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_error()) << args.size();
    auto ping = (*server)->Command({"PING"});
    ASSERT_TRUE(ping.ok());
    EXPECT_EQ(ping->str, "PONG");
  }
  auto keys = (*server)->Command({"COMMAND", "GETKEYS", "SLUICE.DECIDE", "2", "a", "b", "1", "",
                                  "0", "1", "0,10,1000000,10,-1", "0,0,1,0,0", "0,0,1,0,1"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 2u) << keys->str;
  EXPECT_EQ(keys->elements[0].str, "a");
  EXPECT_EQ(keys->elements[1].str, "b");
  // A key of another type: an error, and nothing written.
  ASSERT_TRUE((*server)->Command({"LPUSH", "list", "x"}).ok());
  auto wrong = (*server)->Command({"SLUICE.DECIDE", "2", "fresh", "list", "1", "", "0", "1",
                                   "0,10,1000000,10,-1", "0,0,1,0,0", "0,0,1,0,1"});
  ASSERT_TRUE(wrong.ok());
  EXPECT_TRUE(wrong->is_error());
  auto exists = (*server)->Command({"EXISTS", "fresh"});
  ASSERT_TRUE(exists.ok());
  EXPECT_EQ(exists->integer, 0);
  // A sliding log's keys: the state key, its ":log" set (and a block's key) declared.
  keys = (*server)->Command({"COMMAND", "GETKEYS", "SLUICE.DECIDE", "3", "l", "l:log", "l:b", "3",
                             "", "0", "1", "1,10,1000000,10,-1,5000000", "0,0,1,0,1"});
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->elements.size(), 3u) << keys->str;
  EXPECT_EQ(keys->elements[2].str, "l:b");
  // A text-form log whose ":log" key is no sorted set, or holds members sluice never
  // writes: an error (as the script's redis.call), and Redis stays up. A check whose
  // ":log" key is its own state key, or another check's: decided, no crash.
  const std::string now = "1785000000000000";
  ASSERT_TRUE((*server)->Command({"SET", "tl", "1 1785000060000000 " + now + " 3 3"}).ok());
  ASSERT_TRUE((*server)->Command({"LPUSH", "tl:list", "x"}).ok());
  ASSERT_TRUE((*server)->Command({"ZADD", "tl:junk", "1785000000000000", "junk"}).ok());
  const std::vector<std::vector<std::string>> failing = {
      {"SLUICE.DECIDE", "2", "tl", "tl:list", "3", "c", "0", "1", "1,10,1000000,10,-1",
       "0,0,1,0,1," + now},
      {"SLUICE.DECIDE", "2", "tl", "tl:junk", "3", "c", "0", "1", "1,2,1000000,2,-1",
       "0,0,1,0,1," + now},
  };
  for (const auto& args : failing) {
    auto r = (*server)->Command(args);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_error()) << args[3];
    EXPECT_NE(r->str.find(args[3] == "tl:list" ? "WRONGTYPE" : "not a log sluice writes"),
              std::string::npos)
        << r->str;
    EXPECT_EQ((*server)->Command({"PING"})->str, "PONG");
  }
  for (const std::string& log_key : {std::string("same"), std::string("other")}) {
    auto r =
        (*server)->Command({"SLUICE.DECIDE", "4", "same", log_key, "other", "same", "3", "c", "0",
                            "1", "1,10,1000000,10,-1", "0,0,1,0,0," + now, "0,0,1,0,1," + now});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*server)->Command({"PING"})->str, "PONG");
  }
}

// Redis Cluster routes SLUICE.DECIDE by its declared keys, as it does scripts: a call
// whose keys are in two slots is refused (CROSSSLOT), one for another node's slot is
// redirected (MOVED), one for the node's own slot is decided.
TEST(ModuleCluster, KeysAreDeclaredSoClusterRoutesAndRefusesCrossSlot) {
  RedisClusterOptions o;
  o.primaries = 3;
  o.replicas_per_primary = 0;
  o.args = {"--loadmodule", SLUICE_REDIS_MODULE};
  auto cluster = RedisCluster::Start(std::move(o));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto call = [&](std::vector<std::string> keys) {
    std::vector<std::string> args = {"SLUICE.DECIDE", std::to_string(keys.size())};
    args.insert(args.end(), keys.begin(), keys.end());
    args.insert(args.end(), {"1", "", "0", "1", "0,10,60000000,10,-1"});
    for (std::size_t i = 0; i < keys.size(); ++i) {
      args.push_back(i + 1 == keys.size() ? "0,0,1,0,1" : "0,0,1,0,0");
    }
    return (*cluster)->Command(0, args);
  };
  auto cross = call({"sluice:{a}:x", "sluice:{b}:x"});
  ASSERT_TRUE(cross.ok());
  EXPECT_TRUE(cross->is_error());
  EXPECT_EQ(cross->str.rfind("CROSSSLOT", 0), 0u) << cross->str;
  int moved = 0, decided = 0;
  for (int i = 0; i < 30; ++i) {
    auto r = call({"sluice:{u" + std::to_string(i) + "}:x"});
    ASSERT_TRUE(r.ok());
    if (r->is_error()) {
      EXPECT_EQ(r->str.rfind("MOVED", 0), 0u) << r->str;
      ++moved;
    } else {
      EXPECT_EQ(r->type, REDIS_REPLY_ARRAY);
      ++decided;
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_GT(decided, 0);
  // RedisStore on the cluster sends the module's command to each key's primary.
  auto store = RedisStore::Create({.url = (*cluster)->Url(), .call_timeout = kPatientCallTimeout});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto module_calls = [&] {
    long long n = 0;
    for (std::size_t i = 0; i < 3; ++i) n += (*cluster)->node(i).CommandCalls("sluice.decide");
    return n;
  };
  const long long before = module_calls();
  const Policy p = Policy::FixedWindow("api", 2, std::chrono::minutes(1));
  for (int k = 0; k < 6; ++k) {
    const std::string key = "sluice:{c" + std::to_string(k) + "}:api";
    for (int i = 0; i < 3; ++i) {
      const StoreCheck check{.policy = &p, .key = key};
      Decision d;
      const Status st = (*store)->Run({.checks = {&check, 1}, .now = 0}, {&d, 1});
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(d.allowed, i < 2) << key << " " << i;
    }
  }
  EXPECT_EQ(module_calls() - before, 18);
}

// A Sentinel group whose first primary has the module and whose replica has not, a
// store on it (caller time), and random steps decided by it and by the in-process store
// that sees the same sequence (issue #18 item 4).
class ModuleFailover {
 public:
  static constexpr Micros kCallTimeout = 500'000;

  void Start() {
    RedisSentinelGroupOptions go;
    go.primary_args = {"--loadmodule", SLUICE_REDIS_MODULE};
    auto group = RedisSentinelGroup::Start(go);
    ASSERT_TRUE(group.ok()) << group.status().ToString();
    group_ = std::move(*group);
    auto probe = group_->replica().Command({"SLUICE.VERSION"});
    ASSERT_TRUE(probe.ok() && probe->is_error()) << "the replica must not have the module";
    RedisStoreOptions so;
    so.url = group_->Url();
    so.call_timeout = kCallTimeout;
    so.connect_timeout = 500'000;
    so.use_caller_time = true;
    so.on_warning = [](std::string_view) {};
    auto opened = RedisStore::Create(std::move(so));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    store_ = std::move(*opened);
    for (int i = 0; i < 4; ++i) policies_.push_back(RandomPolicy(rng_, i));
  }
  RedisSentinelGroup& group() { return *group_; }

  // Runs steps until `want` succeeded (bounded in time: once the store has found the
  // primary, calls stop failing) and returns how many failed. A failed call wrote
  // nowhere (a dead or demoted primary writes nothing; the one the sentinels report
  // answers every call), so the in-process store skips it too.
  int Decide(int want) {
    int failures = 0, ok = 0;
    // WaitUntil retries after a failed step, at its poll, until the steps all succeed.
    (void)WaitUntil(
        [&] {
          while (ok < want) {
            bool failed = false;
            RunStep(&failed);
            if (::testing::Test::HasFatalFailure()) return true;
            if (failed) {
              ++failures;
              return false;
            }
            ++ok;
            ++decided_;
          }
          return true;
        },
        std::chrono::seconds(60));
    return failures;
  }
  int decided() const { return decided_; }
  int late() const { return late_; }

 private:
  void RunStep(bool* failed) {
    const Step s = RandomStep(rng_, policies_, &now_, /*wide=*/false);
    const auto c = Prefixed(s, "fo:", &keys_);
    Decision dm[kMaxBatchChecks], dr[kMaxBatchChecks];
    const auto start = std::chrono::steady_clock::now();
    const Status rs = RunOn(*store_, s.op, c, s.now, dr);
    // (scheduling slack on a loaded 2-core machine)
    if (std::chrono::steady_clock::now() - start >
        std::chrono::microseconds(kCallTimeout) + std::chrono::seconds(1)) {
      ++late_;
    }
    *failed = !rs.ok();
    if (!rs.ok()) {
      EXPECT_EQ(rs.code(), ErrorCode::kUnavailable) << rs.ToString();
      return;
    }
    ASSERT_TRUE(RunOn(memory_, s.op, c, s.now, dm).ok());
    if (s.op == StoreOp::kRefund) return;
    for (std::size_t i = 0; i < c.size(); ++i) {
      ASSERT_TRUE(Same(dm[i], dr[i]))
          << "step " << decided_ << " " << AlgorithmName(c[i].policy->algorithm)
          << "\n  memory: " << Describe(dm[i]) << "\n  redis:  " << Describe(dr[i]);
    }
  }

  std::unique_ptr<RedisSentinelGroup> group_;
  std::shared_ptr<RedisStore> store_;
  MemoryStore memory_;
  std::mt19937_64 rng_{77};
  std::vector<Policy> policies_;
  Micros now_ = 1'785'000'000'000'000;
  std::vector<std::string> keys_;
  int decided_ = 0, late_ = 0;
};

// Sentinel fails over from a primary with the module to a replica without it (the
// primary killed): the replica got the module's effects as plain SETs, so the promoted
// node's scripts go on from exactly the counts the module wrote, every call within its
// deadline, against the in-process store that saw the whole sequence.
TEST(ModuleSentinel, FailoverToAPrimaryWithoutTheModuleGoesOnWithLua) {
  ModuleFailover f;
  ASSERT_NO_FATAL_FAILURE(f.Start());
  RedisServer& old = f.group().primary();
  RedisServer& next = f.group().replica();
  const long long lua0 = old.CommandCalls("evalsha");  // (Create's EVALSHA probe)
  ASSERT_EQ(f.Decide(300), 0) << "calls failed before the failover";
  if (HasFatalFailure()) return;
  EXPECT_EQ(old.CommandCalls("sluice.decide"), 300);
  EXPECT_EQ(old.CommandCalls("evalsha"), lua0);
  // Every write of the primary has reached the replica (nothing in flight).
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(old, next));
  ASSERT_TRUE(f.group().KillPrimary().ok());
  ASSERT_EQ(f.group().primary().port(), next.port());
  const int failures = f.Decide(300);
  if (HasFatalFailure()) return;
  EXPECT_EQ(f.decided(), 600) << "the store never decided on the new primary";
  EXPECT_EQ(f.late(), 0) << "a call waited past its deadline";
  EXPECT_GE(next.CommandCalls("evalsha"), 300);
  EXPECT_EQ(next.CommandCalls("sluice.decide"), 0);
  std::printf("[module failover] calls that failed after the kill: %d\n", failures);
  ::testing::Test::RecordProperty("failed_after_kill", failures);
  ExpectEveryKeyHasTtl(next);
}

// There and back by SENTINEL FAILOVER: to the node without the module (the scripts go
// on from the module's counts), then back to the one with it, whose new connections
// probe it again and decide with the module from the scripts' counts. Steps resume once
// the old primary is a replica (it then writes nothing: no call can land on it).
TEST(ModuleSentinel, FailoverBackToTheModuleIsDetectedAgain) {
  ModuleFailover f;
  ASSERT_NO_FATAL_FAILURE(f.Start());
  RedisServer& with = f.group().primary();
  RedisServer& without = f.group().replica();
  auto demoted = [](RedisServer& node) {
    return WaitUntil(
        [&] {
          auto role = node.Command({"ROLE"});
          return role.ok() && !role->elements.empty() && role->elements[0].str == "slave";
        },
        std::chrono::seconds(60));
  };
  ASSERT_EQ(f.Decide(200), 0);
  if (HasFatalFailure()) return;
  EXPECT_EQ(with.CommandCalls("sluice.decide"), 200);
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(with, without));
  ASSERT_TRUE(f.group().Failover().ok());
  ASSERT_EQ(f.group().primary().port(), without.port());
  ASSERT_TRUE(demoted(with));
  const int there = f.Decide(200);
  if (HasFatalFailure()) return;
  EXPECT_EQ(f.decided(), 400);
  EXPECT_GE(without.CommandCalls("evalsha"), 200);
  ASSERT_NO_FATAL_FAILURE(WaitReplicated(without, with));
  ASSERT_TRUE(f.group().WaitHealthy().ok());
  ASSERT_TRUE(f.group().Failover().ok());
  ASSERT_EQ(f.group().primary().port(), with.port());
  ASSERT_TRUE(demoted(without));
  const long long module_before = with.CommandCalls("sluice.decide");
  const int back = f.Decide(200);
  if (HasFatalFailure()) return;
  EXPECT_EQ(f.decided(), 600);
  EXPECT_GE(with.CommandCalls("sluice.decide") - module_before, 200)
      << "the module was not found again";
  EXPECT_EQ(f.late(), 0) << "a call waited past its deadline";
  std::printf("[module failover] failed calls: %d there, %d back\n", there, back);
  ExpectEveryKeyHasTtl(with);
}

// The parser without Redis: each malformed argument list names what is wrong.
TEST(ModuleRequest, ErrorsNameTheArgument) {
  const std::string acquire_a = "0,4,1,0,1:" + std::string(32, 'a');
  struct Case {
    std::vector<std::string_view> args;
    std::string_view says;
  } cases[] = {
      {{"0"}, "numkeys"},
      {{"1", "k", "1", "x", "0", "1", "0,1,1,1,-1", "0,0,1,0,1"}, "clock"},
      {{"1", "k", "1", "", "0", "0", "0,1,1,1,-1", "0,0,1,0,1"}, "number of policies"},
      {{"1", "k", "1", "", "0", "1", "0,1,1", "0,0,1,0,1"}, "policy 0"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "1,0,1,0,1"}, "not in the list"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "0,0,1,5,1"}, "max_wait is for op 1"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,5", "0,0,1,0,1"}, "initial tokens"},
      {{"1", "k", "1", "c", "0", "1", "0,1,1000,1,-1", "0,0,1,0,1"}, "6 comma-separated"},
      {{"1", "", "1", "", "0", "1", "0,1,1000,1,-1", "0,0,1,0,1"}, "empty key"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1,", "0,0,1,0,1"}, "policy 0 is not 5"},
      {{"1", "k", "1", "", "0", "1", "0,+1,1000,1,-1", "0,0,1,0,1"}, "policy 0 is not 5"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "0,0, 1,0,1"}, "check 0 is not 5"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "0,0,1,0,1,0"}, "check 0 is not 5"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "0,0,9223372036854775808,0,1"},
       "check 0 is not 5"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1", "0,0,-,0,1"}, "check 0 is not 5"},
      {{"1", "k", "4", "", "0", "1", "0,1,1000,1,-1", "0,0,1,0,1"}, "layout version must be 1-3"},
      // The sliding log (layout 3): not before it, and with its ":log" key after its own;
      // under overage reject, without a usage record.
      {{"2", "k", "k:log", "2", "", "0", "1", "1,5,1000,5,-1", "0,0,1,0,1"},
       "1 and 5 from layout 3"},
      {{"1", "k", "3", "", "0", "1", "1,5,1000,5,-1", "0,0,1,0,1"}, "leaves it no key"},
      {{"2", "k", "k:log", "3", "", "0", "1", "1,5,1000,5,-1,5000", "0,0,1,0,1"},
       "leaves it no key"},
      {{"2", "k", "k:log", "3", "", "0", "1", "1,5,1000,6,-1", "0,0,1,0,1"},
       "capacity is its limit"},
      // A block (layout 2): the policy's sixth number, and a second key for its checks.
      {{"2", "k", "k:b", "1", "", "0", "1", "0,1,1000,1,-1,5000", "0,0,1,0,1"},
       "policy 0 is not 5 comma-separated"},
      {{"1", "k", "2", "", "0", "1", "0,1,1000,1,-1,5000", "0,0,1,0,1"}, "leaves it no key"},
      {{"3", "k", "k:b", "x", "2", "", "0", "1", "0,1,1000,1,-1,5000", "0,0,1,0,1"},
       "numkeys 3 is not the checks' 2 keys"},
      {{"2", "k", "k:b", "2", "", "0", "1", "0,1,1000,1,-1,0", "0,0,1,0,1"},
       "block_for must be positive"},
      {{"2", "k", "k:b", "2", "", "0", "1", "0,1,1000,1,-1,5000,1,0", "0,0,1,0,1"},
       "policy 0 is not 5 to 7"},
      // on_change (layout 2): the seventh number.
      {{"1", "k", "2", "", "0", "1", "0,1,1000,1,-1,0,3", "0,0,1,0,1"}, "on_change 3 is not"},
      {{"1", "k", "1", "", "0", "1", "0,1,1000,1,-1,0,2", "0,0,1,0,1"},
       "policy 0 is not 5 comma-separated"},
      // Overage (layout 3): the eighth and ninth numbers, and op 7.
      {{"1", "k", "2", "", "0", "1", "0,1,1000,1,-1,0,0,1,0", "0,0,1,0,1"},
       "policy 0 is not 5 to 7"},
      {{"1", "k", "3", "", "0", "1", "0,1,1000,1,-1,0,0,1", "0,0,1,0,1"},
       "policy 0 is not 5, 6, 7 or 9"},
      {{"1", "k", "3", "", "0", "1", "0,1,1000,1,-1,0,0,3,0", "0,0,1,0,1"}, "overage 3 is not"},
      {{"1", "k", "3", "", "0", "1", "0,1,1000,1,-1,0,0,2,5", "0,0,1,0,1"}, "max_debt"},
      {{"1", "k", "2", "", "0", "1", "0,1,1000,1,-1", "0,7,1,0,1"}, "op 7 is not"},
      {{"1", "k", "3", "", "0", "1", "0,1,1000,1,-1", "0,9,1,0,1"}, "or 8 (settle)"},
      // Concurrency limits (layout 3): ops 4-6 with a permit after a colon, theirs only.
      {{"1", "k", "2", "", "0", "1", "5,3,60000000,3,-1", "0,4,1,0,1"}, "1 and 5 from layout 3"},
      {{"1", "k", "3", "", "0", "1", "0,3,60000000,3,-1", acquire_a},
       "a concurrency limit's checks are ops 4-6"},
      {{"1", "k", "3", "", "0", "1", "5,3,60000000,3,-1", "0,0,1,0,1"},
       "a concurrency limit's checks are ops 4-6"},
      {{"1", "k", "3", "", "0", "1", "5,3,60000000,3,-1", "0,4,1,0,1:xyz"}, "permit id 'xyz'"},
      {{"1", "k", "3", "", "0", "1", "5,3,60000000,3,-1", "0,5,1,0,1"}, "permit id ''"},
      // Usage records (layout 3): op 7's fourth number is the record's lifetime, and its
      // record key follows the check's others; a settle (op 8) always has one.
      {{"1", "k", "3", "", "0", "1", "0,10,1000000,10,-1", "0,7,1,5000,1"}, "leaves it no key"},
      {{"2", "k", "k:u:x", "3", "", "0", "1", "0,10,1000000,10,-1", "0,7,1,500,1"},
       "must be kept 1ms to 366 days"},
      {{"1", "k", "3", "", "0", "1", "0,10,1000000,10,-1", "0,8,1,0,1"}, "leaves it no key"},
      {{"3", "k", "k:u:x", "j", "3", "", "0", "1", "0,10,1000000,10,-1", "0,8,1,0,0", "0,0,1,0,1"},
       "share one operation"},
  };
  for (const Case& c : cases) {
    redis_module::ModuleRequest r;
    std::string error;
    EXPECT_FALSE(redis_module::ParseModuleRequest(c.args, &r, &error)) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
  }
  redis_module::ModuleRequest r;
  std::string error;
  // Layout 2: a check with a block has its state key, then its block key.
  const std::vector<std::string_view> blocks = {"3",
                                                "a",
                                                "a:b",
                                                "c",
                                                "2",
                                                "",
                                                "0",
                                                "2",
                                                "0,5,1000000,5,-1,60000000",
                                                "3,10,1000000,20,-1",
                                                "0,0,1,0,0",
                                                "1,0,1,0,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(blocks, &r, &error)) << error;
  ASSERT_EQ(r.checks.size(), 2u);
  EXPECT_EQ(r.policies[0].block_for, 60'000'000);
  EXPECT_EQ(r.checks[0].key, 0u);
  EXPECT_EQ(r.checks[0].block_key, 1);
  EXPECT_EQ(r.checks[1].key, 2u);
  EXPECT_EQ(r.checks[1].block_key, -1);
  // Layout 3: a sliding log's check has its state key, its ":log" key, then its block key.
  const std::vector<std::string_view> logs = {"4",
                                              "a",
                                              "a:log",
                                              "a:b",
                                              "c",
                                              "3",
                                              "",
                                              "0",
                                              "2",
                                              "1,5,1000000,5,-1,60000000",
                                              "0,5,1000000,5,-1",
                                              "0,0,1,0,0",
                                              "1,0,1,0,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(logs, &r, &error)) << error;
  ASSERT_EQ(r.checks.size(), 2u);
  EXPECT_EQ(r.checks[0].key, 0u);
  EXPECT_EQ(r.checks[0].log_key, 1);
  EXPECT_EQ(r.checks[0].block_key, 2);
  EXPECT_EQ(r.checks[1].key, 3u);
  EXPECT_EQ(r.checks[1].log_key, -1);
  // ... and on_change after a block_for (0: none).
  const std::vector<std::string_view> carry = {
      "1", "k", "2", "", "0", "1", "0,5,1000000,5,-1,0,2", "0,0,1,0,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(carry, &r, &error)) << error;
  EXPECT_EQ(r.policies[0].on_change, OnChange::kProportional);
  EXPECT_EQ(r.policies[0].block_for, 0);
  EXPECT_EQ(r.checks[0].block_key, -1);
  // ... and overage after them (layout 3): charged into a debt of at most 50.
  const std::vector<std::string_view> overage = {
      "1", "k", "3", "", "0", "1", "3,100,60000000,100,-1,0,0,1,50", "0,7,500,0,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(overage, &r, &error)) << error;
  EXPECT_EQ(r.policies[0].overage, Overage::kCharge);
  EXPECT_EQ(r.policies[0].max_debt, 50u);
  EXPECT_EQ(r.checks[0].op, 7);
  EXPECT_EQ(r.checks[0].cost, 500u);
  EXPECT_EQ(r.checks[0].record_key, -1);
  // ... a usage record: its key after the block's, its lifetime op 7's fourth number.
  const std::vector<std::string_view> usage = {"5",
                                               "a",
                                               "a:b",
                                               "a:u:1",
                                               "b",
                                               "b:u:1",
                                               "3",
                                               "",
                                               "0",
                                               "2",
                                               "0,5,1000000,5,-1,60000000",
                                               "3,10,1000000,20,-1",
                                               "0,7,1,9000,0",
                                               "1,7,2,3600000000,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(usage, &r, &error)) << error;
  EXPECT_EQ(r.checks[0].block_key, 1);
  EXPECT_EQ(r.checks[0].record_key, 2);
  EXPECT_EQ(r.checks[0].usage_ttl, 9000);
  EXPECT_EQ(r.checks[1].key, 3u);
  EXPECT_EQ(r.checks[1].record_key, 4);
  EXPECT_EQ(r.checks[1].max_wait, 0);
  const std::string permit = "0,5,1,0,1:" + std::string(32, 'f');
  const std::vector<std::string_view> release = {"1",   "k", "3", "", "0", "1", "5,3,60000000,3,-1",
                                                 permit};
  ASSERT_TRUE(redis_module::ParseModuleRequest(release, &r, &error)) << error;
  EXPECT_EQ(r.groups[0].op, StoreOp::kRelease);
  EXPECT_EQ(r.checks[0].permit, std::string(32, 'f'));
  const std::vector<std::string_view> settle = {
      "2", "a", "a:u:1", "3", "", "0", "1", "0,5,1000000,5,-1", "0,8,4,0,1"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(settle, &r, &error)) << error;
  EXPECT_EQ(r.groups[0].op, StoreOp::kSettle);
  EXPECT_EQ(r.checks[0].record_key, 1);
  const std::vector<std::string_view> good = {
      "2", "a", "b", "1", "c", "3600000", "1", "3,10,1000000,20,5", "0,1,2,500,0,7", "0,1,1,0,1,7"};
  ASSERT_TRUE(redis_module::ParseModuleRequest(good, &r, &error)) << error;
  ASSERT_EQ(r.groups.size(), 1u);
  EXPECT_EQ(r.checks[0].max_wait, 500);
  EXPECT_EQ(r.checks[1].now, 7);
  EXPECT_EQ(r.policies[0].Capacity(), 20u);
  // The extremes of a field: -2^63 and 2^63 - 1 are integers (out of range as a now).
  const std::vector<std::string_view> extremes = {
      "1",
      "k",
      "1",
      "c",
      "0",
      "1",
      "3,10,1000000,20,5",
      "0,0,9223372036854775807,0,1,-9223372036854775808"};
  EXPECT_FALSE(redis_module::ParseModuleRequest(extremes, &r, &error));
  EXPECT_NE(error.find("now must be within"), std::string::npos) << error;
}

}  // namespace
}  // namespace sluice::testing
