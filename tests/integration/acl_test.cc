// The minimal ACL user that docs/redis.md recommends, verified against a real server:
// with exactly those permissions every operation of the store works without a
// warning, and without any one of them something visible fails (so none is spare).
// A user without EVALSHA is refused by RedisStore::Create with a clear error, within
// connect_timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "redis_server.h"
#include "sluice/policy.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

using std::chrono::steady_clock;

constexpr Micros kT0 = 1785412800LL * kSec;  // a minute boundary

Status SetUser(RedisServer& server, const std::vector<std::string>& permissions) {
  std::vector<std::string> cmd = {"ACL", "SETUSER", "sluice", "reset", "on", ">pw", "~sluice:*"};
  cmd.insert(cmd.end(), permissions.begin(), permissions.end());
  auto r = server.Command(cmd);
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::InvalidArgument("ACL SETUSER: " + r->str);
  return Status::Ok();
}

std::string UserUrl(const RedisServer& server, int db) {
  return "redis://sluice:pw@127.0.0.1:" + std::to_string(server.port()) + "/" + std::to_string(db);
}

struct Outcome {
  std::vector<std::string> problems;  // what failed, in words
  std::vector<std::string> warnings;  // what the store warned about
};

// Everything the store does, as the user: connect (PING, SELECT, SCRIPT LOAD, CONFIG
// GET), each algorithm allowed and denied, refunds, a batch, the sliding log's every
// path (first entry, pruning, retry and reset lookups, refund), Redis's own clock, a
// reload after SCRIPT FLUSH, and Reset.
Outcome Workload(RedisServer& server, bool caller_time) {
  Outcome out;
  auto fail = [&](const std::string& what, const Status& s) {
    out.problems.push_back(what + ": " + s.ToString());
  };
  RedisStoreOptions o;
  o.url = UserUrl(server, 1);  // SELECT runs only for a database other than 0
  o.use_caller_time = caller_time;
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [&](std::string_view w) { out.warnings.emplace_back(w); };
  auto store = RedisStore::Create(o);
  if (!store.ok()) {
    fail("Create", store.status());
    return out;
  }
  RedisStore& s = **store;
  const std::vector<Policy> policies = {
      Policy::FixedWindow("fw", 1, std::chrono::seconds(10)),
      Policy::SlidingWindowLog("log", 2, std::chrono::seconds(10)),
      Policy::SlidingWindowCounter("swc", 1, std::chrono::seconds(10)),
      Policy::TokenBucket("tb", 1, 1, std::chrono::seconds(10)),
      Policy::Gcra("gcra", 1, std::chrono::seconds(10), 1)};
  auto check = [&](const Policy& p, const std::string& key, Micros now, bool want) {
    StoreCheck c{.policy = &p, .key = key, .cost = 1};
    Decision d;
    Status st = s.Run({.checks = {&c, 1}, .now = now}, {&d, 1});
    if (!st.ok()) {
      fail(p.name + " at +" + std::to_string((now - kT0) / kSec) + "s", st);
    } else if (caller_time && d.allowed != want) {  // on Redis's clock no time passes
      out.problems.push_back(p.name + ": allowed=" + std::to_string(d.allowed));
    }
  };
  for (const Policy& p : policies) {
    const std::string key = "sluice:{acl}:" + p.name;
    check(p, key, kT0, true);
    if (p.algorithm == Algorithm::kSlidingWindowLog) check(p, key, kT0 + kSec, true);
    check(p, key, kT0 + 2 * kSec, false);  // denied: the log looks up retry and reset
    check(p, key, kT0 + 30 * kSec, true);  // the log prunes its old entries
  }
  // A log of more than 8 entries is a sorted set (shorter ones live in their state key):
  // its pruning and its denial's retry lookup.
  {
    const Policy big = Policy::SlidingWindowLog("logbig", 12, std::chrono::seconds(10));
    const std::string key = "sluice:{acl}:logbig";
    for (int i = 0; i < 12; ++i) check(big, key, kT0 + i, true);
    check(big, key, kT0 + 2 * kSec, false);
    check(big, key, kT0 + 30 * kSec, true);
    for (int i = 1; i < 10; ++i) check(big, key, kT0 + 30 * kSec + i, true);
    // a refund of a sorted-set log: the group runner prunes it (ZRANGEBYSCORE of what
    // leaves) and takes its newest entry back
    StoreCheck c{.policy = &big, .key = key, .cost = 1};
    if (Status st =
            s.Run({.op = StoreOp::kRefund, .checks = {&c, 1}, .now = kT0 + 30 * kSec + 10}, {});
        !st.ok())
      fail("refund logbig", st);
    check(big, key, kT0 + 50 * kSec, true);
  }
  // A request in the window the state holds writes only its count (SETRANGE, or SET
  // when the user may not run SETRANGE): the third is the last allowed.
  for (const Policy& p : {Policy::FixedWindow("fw3", 3, std::chrono::seconds(10)),
                          Policy::SlidingWindowCounter("swc3", 3, std::chrono::seconds(10))}) {
    const std::string key = "sluice:{acl}:" + p.name;
    for (int i = 0; i < 4; ++i) check(p, key, kT0 + i, i < 3);
  }
  // Refunds give units back (the sliding log removes or shrinks its newest entry).
  for (const Policy& p : policies) {
    const std::string key = "sluice:{acl}:" + p.name;
    StoreCheck c{.policy = &p, .key = key, .cost = 1};
    if (Status st = s.Run({.op = StoreOp::kRefund, .checks = {&c, 1}, .now = kT0 + 31 * kSec}, {});
        !st.ok())
      fail("refund " + p.name, st);
  }
  // Two checks at once run the batch script.
  const std::string k1 = "sluice:{batch}:fw", k2 = "sluice:{batch}:log";
  StoreCheck batch[2] = {{.policy = &policies[0], .key = k1, .cost = 1},
                         {.policy = &policies[1], .key = k2, .cost = 1}};
  Decision d[2];
  if (Status st = s.Run({.checks = batch, .now = kT0}, d); !st.ok()) fail("batch", st);
  // A flushed script cache: the store reloads the script (SCRIPT LOAD) and retries.
  auto flushed = server.Command({"SCRIPT", "FLUSH"});
  if (!flushed.ok() || flushed->is_error()) out.problems.push_back("SCRIPT FLUSH as admin");
  check(policies[0], "sluice:{reload}:fw", kT0, true);
  if (Status st = s.Reset(policies[1], "sluice:{acl}:log"); !st.ok()) fail("Reset", st);
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::ostringstream s;
  for (const std::string& e : v) s << "\n  " << e;
  return s.str();
}

TEST(Acl, TheMinimalUserCanDoEverythingWithoutAWarning) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(SetUser(**server, kDocumentedAclCommands).ok());
  for (bool caller_time : {true, false}) {
    Outcome o = Workload(**server, caller_time);
    EXPECT_TRUE(o.problems.empty()) << "caller_time=" << caller_time << Join(o.problems);
    EXPECT_TRUE(o.warnings.empty()) << "caller_time=" << caller_time << Join(o.warnings);
  }
}

// Every permission of the line is needed: without it the workload fails, or (CONFIG
// GET) the startup check warns that it could not read maxmemory-policy; SETRANGE only
// saves Redis CPU.
TEST(Acl, EveryPermissionOfTheMinimalLineIsNeeded) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (std::size_t skip = 0; skip < kDocumentedAclCommands.size(); ++skip) {
    const std::string& missing = kDocumentedAclCommands[skip];
    SCOPED_TRACE("without " + missing);
    std::vector<std::string> perms = kDocumentedAclCommands;
    perms.erase(perms.begin() + static_cast<std::ptrdiff_t>(skip));
    ASSERT_TRUE(SetUser(**server, perms).ok());
    ASSERT_TRUE((*server)->Command({"FLUSHALL"}).ok());
    // TIME is only called on Redis's own clock; everything else in caller time too.
    Outcome o = Workload(**server, /*caller_time=*/missing != "+time");
    if (missing == "+setrange" || missing == "+incrby") {
      // Optional: without SETRANGE a fixed window or sliding counter writes its whole
      // state with SET, as before it was used (lua/single_tail.lua); without INCRBY a
      // fixed window reads its counter with GET and writes it with SET
      // (lua/fixed_window.lua), so an ACL line set up for an earlier version keeps working.
      EXPECT_TRUE(o.problems.empty()) << Join(o.problems);
      EXPECT_TRUE(o.warnings.empty()) << Join(o.warnings);
    } else if (missing == "+config|get") {
      EXPECT_TRUE(o.problems.empty()) << Join(o.problems);
      ASSERT_EQ(o.warnings.size(), 1u) << Join(o.warnings);
      EXPECT_NE(o.warnings[0].find("could not read maxmemory-policy"), std::string::npos)
          << o.warnings[0];
    } else {
      EXPECT_FALSE(o.problems.empty()) << missing << " looks unnecessary";
      // The error names the missing command, or (inside a script, where Redis does not
      // name it) says that the user cannot run a command of the script.
      const std::string command = missing.substr(1);
      const std::string all = Join(o.problems);
      EXPECT_TRUE(all.find(command.substr(0, command.find('|'))) != std::string::npos ||
                  all.find("can't run this command") != std::string::npos)
          << all;
    }
  }
}

TEST(Acl, AUserWithoutEvalshaIsRefusedByCreateWithinConnectTimeout) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::string> perms = kDocumentedAclCommands;
  std::erase(perms, "+evalsha");
  ASSERT_TRUE(SetUser(**server, perms).ok());
  RedisStoreOptions o;
  o.url = UserUrl(**server, 0);
  o.connect_timeout = 500'000;
  o.on_warning = [](std::string_view) {};
  const auto start = steady_clock::now();
  auto store = RedisStore::Create(o);
  const auto took = steady_clock::now() - start;
  ASSERT_FALSE(store.ok()) << "a user that cannot run EVALSHA cannot decide anything";
  EXPECT_EQ(store.status().code(), ErrorCode::kInvalidArgument) << store.status().ToString();
  EXPECT_NE(store.status().message().find("evalsha"), std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find("sluice"), std::string::npos)
      << "the message names the user: " << store.status().ToString();
  // connect_timeout plus scheduling slack on a loaded machine.
  EXPECT_LT(took, std::chrono::milliseconds(500 + 1000));
}

}  // namespace
}  // namespace sluice::testing
