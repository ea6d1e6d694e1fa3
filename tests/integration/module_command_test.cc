// The native module's command itself (src/redis/module): malformed arguments are errors
// naming what is wrong and Redis stays up; its keys are declared, so Redis Cluster
// routes it and refuses a cross-slot call; a Sentinel failover to a primary without the
// module goes on with the scripts, and back; and the parser, without Redis.
#include <gtest/gtest.h>

#include <random>

#include "burst.h"
#include "module_support.h"
#include "redis/module/request.h"
#include "redis/module/wire.h"
#include "redis_cluster.h"
#include "redis_sentinel.h"
#include "redis_server.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::testing {
namespace {

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
      // a layout after the module's
      {"SLUICE.DECIDE", "1", "k", std::to_string(redis::kModuleWireVersion + 1), "", "0", "1",
       "0,10,1000000,10,-1", "0,0,1,0,1"},
      // SLUICE.DECIDE1: its arity, a bad policy or check, a check that is not its group's
      // last, a sliding log's check (two keys), a caller's now (its clock is the server's)
      {"SLUICE.DECIDE1", "k", "0,10,1000000,10,-1"},
      {"SLUICE.DECIDE1", "k", "0,10,1000000,10,-1", "0,0,1,0,1", "x"},
      {"SLUICE.DECIDE1", "k", "0,10,-5,10,-1", "0,0,1,0,1"},
      {"SLUICE.DECIDE1", "k", "0,10,1000000,10,-1", "0,0,11,0,1"},
      {"SLUICE.DECIDE1", "k", "0,10,1000000,10,-1", "0,0,1,0,0"},
      {"SLUICE.DECIDE1", "k", "1,10,1000000,10,-1", "0,0,1,0,1"},
      {"SLUICE.DECIDE1", "k", "0,10,1000000,10,-1", "0,0,1,0,1,1785000000000000"},
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
  // SLUICE.DECIDE1 decides, and declares its one key.
  auto one = (*server)->Command({"SLUICE.DECIDE1", "one", "0,10,1000000,10,-1", "0,0,1,0,1"});
  ASSERT_TRUE(one.ok());
  ASSERT_FALSE(one->is_error()) << one->str;
  EXPECT_EQ((*server)->Command({"EXISTS", "one"})->integer, 1);
  auto one_key = (*server)->Command({"COMMAND", "GETKEYS", "SLUICE.DECIDE1", "one", "p", "c"});
  ASSERT_TRUE(one_key.ok());
  ASSERT_EQ(one_key->elements.size(), 1u) << one_key->str;
  EXPECT_EQ(one_key->elements[0].str, "one");
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
  // A permit operation on a key that is no sorted set: WRONGTYPE, as the script's.
  for (const char* op : {"4", "5", "6"}) {
    auto r = (*server)->Command(
        {"SLUICE.DECIDE", "1", "tl:list", "3", "c", "0", "1", "5,3,60000000,3,-1",
         std::string("0,") + op + ",1,0,1," + now + ":" + std::string(32, 'a')});
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_error()) << "op " << op;
    EXPECT_NE(r->str.find("WRONGTYPE"), std::string::npos) << r->str;
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
    for (std::size_t i = 0; i < 3; ++i) n += ModuleCalls((*cluster)->node(i));
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
  EXPECT_EQ(ModuleCalls(old), 300);
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
  EXPECT_EQ(ModuleCalls(next), 0);
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
  EXPECT_EQ(ModuleCalls(with), 200);
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
  const long long module_before = ModuleCalls(with);
  const int back = f.Decide(200);
  if (HasFatalFailure()) return;
  EXPECT_EQ(f.decided(), 600);
  EXPECT_GE(ModuleCalls(with) - module_before, 200) << "the module was not found again";
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
      {{"1", "k", "5", "", "0", "1", "0,1,1000,1,-1", "0,0,1,0,1"}, "layout version must be 1-4"},
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
