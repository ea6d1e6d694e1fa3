// RedisStore on Redis's own clock: skewed clients agree, every key has a TTL no
// longer than its policy needs, maxmemory-policy is checked, URLs select what they say.
#include <gtest/gtest.h>

#include <random>

#include "redis/scripts.h"
#include "sluice/key.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

std::shared_ptr<RedisStore> Connect(const std::string& url, std::vector<std::string>* warnings,
                                    bool caller_time = false) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = kPatientCallTimeout;
  o.use_caller_time = caller_time;
  o.on_warning = [warnings](std::string_view w) {
    if (warnings) warnings->emplace_back(w);
  };
  auto s = RedisStore::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

std::unique_ptr<Limiter> MakeLimiter(std::shared_ptr<Store> store, std::vector<Policy> policies,
                                     std::shared_ptr<const Clock> clock) {
  LimiterOptions o;
  o.policies = std::move(policies);
  o.store = std::move(store);
  o.clock = std::move(clock);
  o.deny_cache = false;
  auto l = Limiter::Create(std::move(o));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

// The group runner's layout (lua/runner.lua, docs/redis.md "Wire layout"): a check's
// extra argument (a reservation's max_wait; a cost from 2^35 on) is read where it is,
// so the checks after it keep their fields (a wrong stride would misread the second
// check), and each decision comes back packed (allowed) or as four integers (denied).
TEST(RedisScripts, ExtraArgumentsKeepTheRunnerLayout) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  // Caller time 10 s into an hour; policy 0: fixed window, 2 per hour; policy 1: fixed
  // window, 2^40 per hour.
  const long long ws = 3'600'000'000, now = ws + 10'000'000, reset = ws + ws - now;
  auto number = [](long long cost, bool big, long long kind, long long policy, bool last) {
    return std::to_string(((((big ? 0 : cost) * 2 + (big ? 1 : 0)) * 16 + kind) * 4096 + policy) *
                              2 +
                          (last ? 1 : 0));
  };
  const std::string w = std::to_string(ws), t = std::to_string(now);
  auto call = [&](std::vector<std::string> checks) {
    std::vector<std::string> cmd = {"EVAL",
                                    std::string(redis::BatchScript().source),
                                    "3",
                                    "sluice:{ext}:a",
                                    "sluice:{ext}:b",
                                    "sluice:{ext}:c",
                                    "c",
                                    "3600000",
                                    "2",
                                    "0",
                                    "2",
                                    w,
                                    "2",
                                    "-1",
                                    "0",
                                    "0",
                                    "0",
                                    std::to_string(1LL << 40),
                                    w,
                                    std::to_string(1LL << 40),
                                    "-1",
                                    "0",
                                    "0",
                                    t};
    cmd.insert(cmd.end(), checks.begin(), checks.end());
    return server->Command(cmd);
  };
  const long long big = (1LL << 36) + 5;
  for (long long remaining : {1, 0}) {
    // a reservation (kind 1, max_wait 5 us: ignored by a window), a plain check, and
    // a cost of its own argument
    auto r = call({number(1, false, 1, 0, false), "5", number(1, false, 0, 0, false),
                   number(0, true, 0, 1, true), std::to_string(big)});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->type, REDIS_REPLY_ARRAY) << r->str;
    // (the third does not pack below 2^53: four integers)
    ASSERT_EQ(r->elements.size(), 6U);
    for (std::size_t i : {0U, 1U}) {
      EXPECT_EQ(r->elements[i].integer, (reset * 3 + remaining) * 2 + 1) << "check " << i;
    }
    EXPECT_EQ(r->elements[2].integer, 2);
    EXPECT_EQ(r->elements[3].integer, (1LL << 40) - big * (2 - remaining));
    EXPECT_EQ(r->elements[4].integer, reset);
    EXPECT_EQ(r->elements[5].integer, 0);
  }
  auto denied = call({number(1, false, 0, 0, false), number(1, false, 0, 0, true)});
  ASSERT_TRUE(denied.ok()) << denied.status().ToString();
  ASSERT_EQ(denied->elements.size(), 8U);
  for (std::size_t i : {0U, 4U}) {
    EXPECT_EQ(denied->elements[i].integer, 0) << "check " << i / 4 << " denied";
    EXPECT_EQ(denied->elements[i + 3].integer, reset) << "check " << i / 4 << " retry_after";
  }
}

// Three app servers whose clocks are 10 s apart share one bucket. The bucket refills
// 10 per minute, so if any of them used its own clock, the one 10 s ahead would see
// about 1.7 tokens more than the others.
void RunSkewedClients(bool caller_time, int* allowed_out) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  const Micros real_now = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  const Policy bucket = Policy::TokenBucket("bucket", 10, 10, std::chrono::minutes(1));
  std::vector<std::unique_ptr<Limiter>> clients;
  for (Micros skew : {-10 * kSec, 0 * kSec, 10 * kSec}) {
    auto store = Connect(server->Url(), nullptr, caller_time);
    ASSERT_NE(store, nullptr);
    clients.push_back(MakeLimiter(store, {bucket}, std::make_shared<ManualClock>(real_now + skew)));
  }
  int allowed = 0;
  std::uint64_t expected_remaining = 9;
  for (int i = 0; i < 30; ++i) {
    auto d = clients[static_cast<std::size_t>(i) % 3]->Acquire("user:1");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    if (d->allowed) {
      ++allowed;
      if (!caller_time) {
        EXPECT_EQ(d->remaining, expected_remaining) << "client " << i % 3;
        --expected_remaining;
      }
    }
  }
  *allowed_out = allowed;
}

TEST(RedisClock, ClientsWithSkewedClocksGetTheSameDecisions) {
  int allowed = 0;
  RunSkewedClients(false, &allowed);
  EXPECT_EQ(allowed, 10) << "exactly the bucket, whatever the clients' clocks say";
}

TEST(RedisClock, CallerTimeModeWouldLetSkewMintTokens) {
  // The control experiment: the same clients in caller-time mode disagree, which is
  // why production uses Redis's clock.
  int allowed = 0;
  RunSkewedClients(true, &allowed);
  EXPECT_GT(allowed, 10);
}

// Upper bound on the TTL each algorithm's state needs, in ms (rounded up).
long long MaxTtlMs(const Policy& p) {
  const double per_unit = static_cast<double>(p.window) / static_cast<double>(p.limit);
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:  // the last permit's expiry: at most a lease
      return (p.window + 999) / 1000;
    case Algorithm::kSlidingWindowCounter:
      return (2 * p.window + 999) / 1000;
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
      return static_cast<long long>(std::ceil(per_unit * static_cast<double>(p.Capacity()) / 1000));
  }
  return 0;
}

TEST(RedisKeys, EveryKeyHasATtlNoLongerThanItsPolicyNeeds) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  auto store = Connect(server->Url(), nullptr);
  ASSERT_NE(store, nullptr);
  using std::chrono::seconds;
  std::vector<Policy> policies = {
      Policy::FixedWindow("fixed", 50, seconds(30)),
      Policy::SlidingWindowLog("log", 20, seconds(20)),
      Policy::SlidingWindowCounter("counter", 40, seconds(15)),
      Policy::TokenBucket("bucket", 30, 10, seconds(60)),
      Policy::Gcra("gcra", 10, seconds(10), 25),
  };
  auto limiter = MakeLimiter(store, policies, nullptr);
  ASSERT_NE(limiter, nullptr);
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "user:" + std::to_string(rng() % 40);
    if (rng() % 4 == 0) {
      const std::string ip = "ip:" + std::to_string(rng() % 9);
      Check checks[2] = {{rng() % policies.size(), key, rng() % 3},
                         {rng() % policies.size(), ip, 1}};
      ASSERT_TRUE(limiter->Acquire(checks).ok());
    } else {
      ASSERT_TRUE(limiter->Acquire(key, rng() % 3).ok());
    }
  }
  // Every key with its PTTL in one atomic step. KEYS then one PTTL per key raced with
  // expiry: a fixed window's key expires at its window's end, which may fall between
  // the two (PTTL -2), and did 1 run in 15 on a loaded machine. Inside a script Redis
  // neither runs nor expires anything else, so each listed key has its TTL as of then.
  auto snapshot =
      server->Command({"EVAL",
                       "local out = {} for _, k in ipairs(redis.call('KEYS', '*')) do "
                       "out[#out + 1] = k out[#out + 1] = redis.call('PTTL', k) end return out",
                       "0"});
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_FALSE(snapshot->is_error()) << snapshot->str;
  ASSERT_EQ(snapshot->elements.size() % 2, 0u);
  ASSERT_GT(snapshot->elements.size() / 2, 50u);
  for (std::size_t i = 0; i < snapshot->elements.size(); i += 2) {
    const std::string& key = snapshot->elements[i].str;
    const long long ttl = snapshot->elements[i + 1].integer;
    EXPECT_GT(ttl, 0) << key << " has no TTL (PTTL " << ttl << ")";
    const Policy* p = nullptr;
    for (const Policy& q : policies) {
      const std::string suffix = "}:" + q.name;
      if (key.ends_with(suffix) || key.ends_with(suffix + ":log")) p = &q;
    }
    ASSERT_NE(p, nullptr) << key;
    EXPECT_LE(ttl, MaxTtlMs(*p)) << key;
  }
}

TEST(RedisSetup, WarnsWhenRedisMayEvictLimiterKeys) {
  auto lru =
      RedisServer::Start({.args = {"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}});
  ASSERT_TRUE(lru.ok()) << lru.status().ToString();
  std::vector<std::string> warnings;
  ASSERT_NE(Connect((*lru)->Url(), &warnings), nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("allkeys-lru"), std::string::npos) << warnings[0];

  auto safe =
      RedisServer::Start({.args = {"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}});
  ASSERT_TRUE(safe.ok()) << safe.status().ToString();
  warnings.clear();
  ASSERT_NE(Connect((*safe)->Url(), &warnings), nullptr);
  EXPECT_TRUE(warnings.empty());

  // A managed Redis may disable CONFIG: still works, with a warning that says so.
  auto no_config = RedisServer::Start({.args = {"--rename-command", "CONFIG", ""}});
  ASSERT_TRUE(no_config.ok()) << no_config.status().ToString();
  warnings.clear();
  auto store = Connect((*no_config)->Url(), &warnings);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("could not read maxmemory-policy"), std::string::npos) << warnings[0];
}

TEST(RedisSetup, UrlsSelectTheDatabaseAndTheUnixSocket) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  const Policy p = Policy::FixedWindow("api", 5, std::chrono::minutes(1));
  for (const std::string& url : {server->Url() + "/3", server->UnixUrl() + "?db=3"}) {
    SCOPED_TRACE(url);
    auto store = Connect(url, nullptr);
    ASSERT_NE(store, nullptr);
    auto limiter = MakeLimiter(store, {p}, nullptr);
    ASSERT_TRUE(limiter->Acquire("k").ok());
  }
  auto dbs = server->Command({"INFO", "keyspace"});
  ASSERT_TRUE(dbs.ok());
  EXPECT_NE(dbs->str.find("db3:keys=1"), std::string::npos) << dbs->str;
  EXPECT_EQ(dbs->str.find("db0:"), std::string::npos) << dbs->str;
}

TEST(RedisSetup, OpenStoreChoosesTheStoreByUrl) {
  auto memory = OpenStore("memory://");
  ASSERT_TRUE(memory.ok());
  EXPECT_FALSE((*memory)->IsRemote());
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  auto redis = OpenStore(server->Url());
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  EXPECT_TRUE((*redis)->IsRemote());
  auto bad = OpenStore("mysql://x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::testing

namespace sluice::testing {
namespace {

// The least-privilege ACL user that docs/redis.md recommends is enough for every
// algorithm (and the ACL form of the URL works).
TEST(RedisSetup, TheDocumentedAclUserIsEnough) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto acl = (*server)->Command(DocumentedAclUser("sluice", "secret"));
  ASSERT_TRUE(acl.ok() && !acl->is_error()) << (acl.ok() ? acl->str : acl.status().ToString());
  std::vector<std::string> warnings;
  auto store =
      Connect("redis://sluice:secret@127.0.0.1:" + std::to_string((*server)->port()), &warnings);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  std::vector<Policy> all = {Policy::FixedWindow("fixed", 2, std::chrono::seconds(10)),
                             Policy::SlidingWindowLog("log", 2, std::chrono::seconds(10)),
                             Policy::SlidingWindowCounter("counter", 2, std::chrono::seconds(10)),
                             Policy::TokenBucket("bucket", 2, 2, std::chrono::seconds(10)),
                             Policy::Gcra("gcra", 2, std::chrono::seconds(10), 2)};
  for (Policy& p : all) p.failure_mode = FailureMode::kFailClosed;
  auto limiter = MakeLimiter(store, all, nullptr);
  for (int i = 0; i < 3; ++i) {
    Decision per[5];
    auto d = limiter->Acquire("user:1", 1, per);
    ASSERT_TRUE(d.ok());
    for (const Decision& x : per) EXPECT_EQ(x.source, DecisionSource::kStore);
    EXPECT_EQ(d->allowed, i < 2);
  }
  // Refunds use the same commands (and ZREM for the sliding log).
  ASSERT_TRUE(limiter->Refund("user:1").ok());
  EXPECT_TRUE(limiter->Acquire("user:1")->allowed);
  ASSERT_TRUE(limiter->Reset("user:1").ok());
  EXPECT_TRUE(limiter->Acquire("user:1")->allowed);
}

}  // namespace
}  // namespace sluice::testing
