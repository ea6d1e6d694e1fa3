// RedisStore with the native module (src/redis/module): it finds the module at connect,
// `module=off` forces the scripts, a module that goes away hands over to them within
// the call; merged calls share one command; and each feature the module decides
// (blocks, overage charges, usage reservations, permits, sliding logs) is decided by it,
// as the in-process store or the scripts decide it, with no script call.
#include <gtest/gtest.h>

#include <atomic>

#include "burst.h"
#include "coalesce_differential.h"
#include "many_processes.h"
#include "module_support.h"
#include "redis_server.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::testing {
namespace {

class ModuleStore : public OnServer {};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleStore, kEveryServer, ServerName);

// The tests of each feature the module decides: a server with the module, a store on it
// (caller time) and the in-process store that decides the same sequence; each test ends
// with ExpectOnlyTheModule.
class ModuleFeature : public OnServer {
 protected:
  void SetUp() override {
    auto started = StartWithModule();
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(*started);
    store = Open(server->Url());
    ASSERT_NE(store, nullptr);
    scripts = server->CommandCalls("evalsha");
    module_calls = ModuleCalls(*server);
  }
  // Every key has a TTL, no script decided, and the module was called `calls` times.
  void ExpectOnlyTheModule(std::size_t calls) const {
    ExpectEveryKeyHasTtl(*server);
    EXPECT_EQ(server->CommandCalls("evalsha"), scripts) << "no script decided";
    EXPECT_EQ(ModuleCalls(*server) - module_calls, static_cast<long long>(calls));
  }
  // Runs one check of `p` on `key` doing `op` at `at` on the store and on the in-process
  // one, and expects the same decision (a refund has none); returns the store's.
  Decision ExpectAsMemory(const Policy& p, const std::string& key, StoreOp op, std::uint64_t cost,
                          Micros at, Micros t0) {
    const StoreCheck c{.policy = &p, .key = key, .cost = cost};
    const std::size_t n = op == StoreOp::kRefund ? 0 : 1;
    Decision want, got;
    EXPECT_TRUE(memory.Run({.op = op, .checks = {&c, 1}, .now = at}, {&want, n}).ok());
    EXPECT_TRUE(store->Run({.op = op, .checks = {&c, 1}, .now = at}, {&got, n}).ok());
    if (n == 1) {
      EXPECT_TRUE(Same(want, got)) << "at +" << at - t0 << " us\n  memory: " << Describe(want)
                                   << "\n  module: " << Describe(got);
    }
    return got;
  }
  std::unique_ptr<RedisServer> server;
  std::shared_ptr<RedisStore> store;
  MemoryStore memory;
  long long scripts = 0, module_calls = 0;
};
INSTANTIATE_TEST_SUITE_P(Servers, ModuleFeature, kEveryServer, ServerName);

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
    const long long module0 = ModuleCalls(*c.server);
    const long long lua0 = c.server->CommandCalls("evalsha");
    for (int i = 0; i < 4; ++i) {
      const StoreCheck check{.policy = &p, .key = key};
      Decision d;
      ASSERT_TRUE(store->Run({.checks = {&check, 1}, .now = 0}, {&d, 1}).ok());
      EXPECT_EQ(d.allowed, i < 3) << c.url << " decision " << i;
    }
    EXPECT_EQ(ModuleCalls(*c.server) - module0, c.module ? 4 : 0) << c.url;
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
  EXPECT_EQ(ModuleCalls(**server), 3);
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

// A call of one check with one key on the server's clock (most calls sent alone) is the
// short SLUICE.DECIDE1; a batch, a sliding log's check (two keys) and a caller-time call
// are SLUICE.DECIDE. Each decides as the in-process store does.
TEST_P(ModuleStore, AOneCheckCallIsTheShortCommand) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = Open((*server)->Url(), /*caller_time=*/false);
  auto timed = Open((*server)->Url(), /*caller_time=*/true);
  ASSERT_TRUE(store && timed);
  const Policy fw = Policy::FixedWindow("fw", 2, std::chrono::hours(1));
  const Policy log = Policy::SlidingWindowLog("log", 2, std::chrono::hours(1));
  struct Call {
    RedisStore* store;
    std::vector<StoreCheck> checks;
    const char* command;  // the one it is sent as
  };
  const std::vector<Call> calls = {
      {store.get(), {{.policy = &fw, .key = "one"}}, "sluice.decide1"},
      {store.get(), {{.policy = &fw, .key = "one"}}, "sluice.decide1"},
      {store.get(), {{.policy = &fw, .key = "one"}}, "sluice.decide1"},  // denied
      {store.get(), {{.policy = &fw, .key = "a"}, {.policy = &fw, .key = "b"}}, "sluice.decide"},
      {store.get(), {{.policy = &log, .key = "log"}}, "sluice.decide"},
      {timed.get(), {{.policy = &fw, .key = "timed"}}, "sluice.decide"},
  };
  const bool allowed[] = {true, true, false, true, true, true};
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const long long before = (*server)->CommandCalls(c.command);
    const long long all = ModuleCalls(**server);
    Decision d[2];
    ASSERT_TRUE(c.store->Run({.checks = c.checks, .now = kNoon}, {d, c.checks.size()}).ok());
    EXPECT_EQ(d[0].allowed, allowed[i]) << "call " << i;
    EXPECT_EQ((*server)->CommandCalls(c.command) - before, 1) << "call " << i;
    EXPECT_EQ(ModuleCalls(**server) - all, 1) << "call " << i;
  }
}

// An ACL user with the module's commands of an earlier sluice (+sluice.decide
// +sluice.version, without +sluice.decide1, docs/redis.md "ACL"): its one-check call is
// refused unrun (NOPERM) and decided by the scripts within the call, and that connection
// keeps to the scripts; with +sluice.decide1 the module decides every call.
TEST_P(ModuleStore, AUserWithoutTheShortCommandIsDecidedByTheScripts) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (const std::string user : {"earlier", "current"}) {
    std::vector<std::string> module = {"+sluice.decide", "+sluice.version"};
    if (user == "current") module.push_back("+sluice.decide1");
    auto ok = (*server)->Command(DocumentedAclUser(user, "secret", module));
    ASSERT_TRUE(ok.ok() && !ok->is_error()) << (ok.ok() ? ok->str : "");
    auto store = Open("redis://" + user + ":secret@127.0.0.1:" + std::to_string((*server)->port()),
                      /*caller_time=*/false);
    ASSERT_TRUE(store) << user;
    const Policy p = Policy::FixedWindow("api", 3, std::chrono::minutes(1));
    const std::string key = "sluice:{" + user + "}:api";
    const long long short0 = (*server)->CommandCalls("sluice.decide1");
    const long long lua0 = (*server)->CommandCalls("evalsha");
    for (int i = 0; i < 4; ++i) {
      const StoreCheck check{.policy = &p, .key = key};
      Decision d;
      ASSERT_TRUE(store->Run({.checks = {&check, 1}, .now = 0}, {&d, 1}).ok()) << user;
      EXPECT_EQ(d.allowed, i < 3) << user << " decision " << i;
    }
    const bool decides = user == "current";  // (the module, every call)
    EXPECT_EQ((*server)->CommandCalls("sluice.decide1") - short0, decides ? 4 : 0) << user;
    EXPECT_EQ((*server)->CommandCalls("evalsha") - lua0, decides ? 0 : 4) << user;
  }
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
  EXPECT_LT(ModuleCalls(**server), kCalls);
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
  const long long before = ModuleCalls(**server);
  const std::vector<Outcome> got = Burst(**s, a, groups, 0);
  for (const Outcome& o : got) {
    ASSERT_TRUE(o.status.ok()) << o.status.ToString();
    ASSERT_EQ(o.decisions.size(), 1u);
  }
  EXPECT_TRUE(got[0].decisions[0].allowed);
  EXPECT_EQ((*s)->Stats().coalesced_calls, 1u);
  EXPECT_EQ(ModuleCalls(**server) - before, 2) << "the trigger's and the merged one";
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

// The coalesce differential on the module (coalesce_differential.h): random bursts of
// decisions, penalties, blocks, overage charges, usage records and permits' acquires,
// releases and extends, queued together and merged into shared SLUICE.DECIDEs from two
// groups on, are decided as the in-process model decides them one after the other, and
// no script runs.
TEST_P(ModuleStore, MergedCallsOfEveryKindMatchTheModel) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto store = CoalescingStore(/*caller_time=*/true, 16, (*server)->Url());
  ASSERT_NE(store, nullptr);
  const long long scripts = (*server)->CommandCalls("evalsha");
  ExpectRandomInterleavingsAsModel(*store, **server, /*batch=*/true, /*module=*/true);
  EXPECT_EQ((*server)->CommandCalls("evalsha"), scripts) << "no script decided";
}

// Exactness under concurrency with the module (many_processes.h): 4 processes x 8
// threads on one key per algorithm never get more than each algorithm allows, every
// algorithm but concurrency decided by the module (its calls counted).
TEST_P(ModuleStore, ManyProcessesAndThreadsNeverExceedTheLimit) {
  auto server = StartWithModule();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ExpectManyProcessesWithinTheLimit((*server)->Url());
  EXPECT_GT(ModuleCalls(**server), 1000);
}

// A policy with block_for is decided by the module, its block in the key the scripts
// keep it in (state key + ":b", its end in us, a TTL to then): the same decisions as the
// in-process store through a denial that starts the block, a later window still
// blocked, a penalty that starts a block again once it ended, and no script call.
TEST_P(ModuleFeature, BlocksAreDecidedByTheModule) {
  Policy p = Policy::FixedWindow("login", 3, std::chrono::minutes(1));
  p.block_for = 10 * 60'000'000LL;
  const std::string key = "sluice:{u1}:login";
  const Micros t0 = 1'785'000'000'000'000;  // (on a minute boundary)
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
    const Decision got = ExpectAsMemory(p, key, st.op, st.cost, st.at, t0);
    if (!got.allowed && got.retry_after > 60'000'000) ++blocked;
  }
  EXPECT_GE(blocked, 4);
  auto until = server->Command({"GET", key + ":b"});
  ASSERT_TRUE(until.ok());
  EXPECT_EQ(until->str, std::to_string(t0 + 660'000'001 + p.block_for));
  ExpectOnlyTheModule(std::size(steps));
}

// Overage (Policy::overage) is decided by the module: a decision that does not fit, a
// usage report beyond the capacity, and a check that fits in a group another check
// denies are each charged per their rule (a debt bounded at max_debt; drain: what
// remains), answered denied with the units taken, a blocked key staying blocked. The
// same decisions as the in-process store, and no script call.
TEST_P(ModuleFeature, OverageChargesAreDecidedByTheModule) {
  Policy tokens = Policy::TokenBucket("tokens", 100, 100, std::chrono::minutes(1));
  tokens.overage = Overage::kCharge;
  tokens.max_debt = 50;
  Policy calls = Policy::FixedWindow("calls", 3, std::chrono::minutes(1));
  calls.overage = Overage::kDrain;
  calls.block_for = 10 * 60'000'000LL;
  ASSERT_TRUE(ValidatePolicy(tokens).ok() && ValidatePolicy(calls).ok());
  const Micros t0 = 1'785'000'000'000'000;  // (on a minute boundary)
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
  ExpectOnlyTheModule(std::size(steps));
}

// Usage reservations (StoreCheck::usage_id) and their settles are decided by the
// module: a reservation records what it took (its cost, or what its overage charged
// when denied); a settle above it decides the rest (charged when it does not fit),
// below it refunds the difference, and a second settle, an unknown id or an expired
// record change nothing. The same decisions and errors as the in-process store, and no
// script call.
TEST_P(ModuleFeature, UsageReservationsAndSettlesAreDecidedByTheModule) {
  Policy tokens = Policy::TokenBucket("tokens", 100, 100, std::chrono::minutes(1));
  tokens.overage = Overage::kCharge;
  tokens.max_debt = 50;
  const std::string key = "sluice:{u1}:tokens";
  const Micros t0 = 1'785'000'000'000'000;
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
  ExpectOnlyTheModule(std::size(steps));
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
  const long long module_calls = ModuleCalls(**server);
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
      EXPECT_EQ(ModuleCalls(**server), module_calls) << "module=off";
    }
  }
  EXPECT_EQ(ModuleCalls(**server) - module_calls, std::size(steps));
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
TEST_P(ModuleFeature, SlidingLogsAreDecidedByTheModule) {
  Policy p = Policy::SlidingWindowLog("search", 12, std::chrono::minutes(1));
  p.block_for = 5 * 60'000'000LL;
  const std::string key = "sluice:{u1}:search";
  const Micros t0 = 1'785'000'000'000'000;
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
    const Decision got = ExpectAsMemory(p, key, st.op, st.cost, st.at, t0);
    if (st.at == t0 + 9'000) {
      EXPECT_EQ(Contents(*server, key + ":log").rfind("zset|", 0), 0u) << "not spilled";
    }
    if (st.op == StoreOp::kRefund) continue;
    if (!got.allowed && got.retry_after >= 60'000'000) ++blocked;
  }
  EXPECT_GE(blocked, 3);
  ExpectOnlyTheModule(std::size(steps));
}

// A penalty queued with a decision shares its command too (on the scripts it would share
// the batch script's calls only).
TEST_P(ModuleStore, APenaltyAndADecisionShareOneCommand) {
  const Policy p = Policy::Gcra("gcra", 5, std::chrono::hours(1), 5);
  ExpectOneMergedCommand(Binary(), p, p, StoreOp::kPenalize);
}

}  // namespace
}  // namespace sluice::testing
