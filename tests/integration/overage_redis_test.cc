// Usage charged after the fact (issue #21 item 3) on Redis's own clock (the production
// mode), through the Limiter: an overshooting report charged into debt and the next
// request refused, the usage reservation's record key (state key + ":u:<id>") with its
// TTL, a settle applied once (a retry answers already_settled, a deleted record is
// NotFound), and bad input. The decisions themselves are held to the in-process
// store's by the differential test (OverageChargesAndSettles).
#include <gtest/gtest.h>

#include <chrono>

#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

std::unique_ptr<Limiter> Make(RedisServer& server, std::vector<Policy> policies) {
  RedisStoreOptions o;
  o.url = server.Url();
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  LimiterOptions lo;
  lo.policies = std::move(policies);
  lo.store = *store;
  auto limiter = Limiter::Create(std::move(lo));
  EXPECT_TRUE(limiter.ok()) << limiter.status().ToString();
  return std::move(*limiter);
}

Policy Charging(Policy p, std::uint64_t max_debt) {
  p.overage = Overage::kCharge;
  p.max_debt = max_debt;
  return p;
}

// The LLM budget: the request-time check only looks, the usage report
// overshoots and is charged (up to the bound), and the next request is refused (the
// deny cache may answer it now: it is a plain request).
TEST(RedisOverage, AnOvershootingReportIsChargedThenTheKeyIsRefused) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  auto l = Make(*server,
                {Charging(Policy::TokenBucket("tpm", 1000, 1000, std::chrono::hours(1)), 3000)});
  ASSERT_TRUE(l->Peek("key:7")->allowed);
  auto d = l->Acquire("key:7", 5000);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->charged, 4000u);  // capacity 1000 + max_debt 3000; 1000 dropped
  EXPECT_EQ(d->remaining, 0u);
  EXPECT_GT(d->retry_after, 3 * 3600 * kSec / 1000 * 1000 - 60 * kSec);  // ~3 h of refill
  EXPECT_FALSE(l->Peek("key:7")->allowed);
  // A report while in debt up to the bound is dropped whole, and still reaches Redis.
  d = l->Acquire("key:7", 10);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->charged, 0u);
  EXPECT_FALSE(d->allowed);
}

TEST(RedisOverage, ReserveAndSettleOnceWithTheRecordKey) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  auto l = Make(*server, {Charging(Policy::FixedWindow("tokens", 1000, std::chrono::hours(1)), 0)});
  auto r = l->ReserveUsage("key:7", 800, 10 * 60 * kSec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->decision.allowed);
  ASSERT_EQ(r->id.size(), kPermitIdLength);
  const std::string record = "sluice:{key%3A7}:tokens:u:" + r->id;
  auto ttl = server->Command({"PTTL", record});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(ttl->integer, 9 * 60 * 1000);
  EXPECT_LE(ttl->integer, 10 * 60 * 1000);
  auto s = l->SettleUsage("key:7", r->id, 350);  // 450 come back
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->already_settled);
  EXPECT_EQ(s->decision.remaining, 650u);
  // A retry after a timeout changes nothing, whatever its actual.
  for (std::uint64_t actual : {350u, 0u, 5000u}) {
    s = l->SettleUsage("key:7", r->id, actual);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->already_settled) << actual;
    EXPECT_EQ(s->decision.remaining, 650u) << actual;
  }
  EXPECT_GT(server->Command({"PTTL", record})->integer, 8 * 60 * 1000);  // kept, settled
  // An expired (here: deleted) record is NotFound, naming the id; nothing changes.
  auto r2 = l->ReserveUsage("key:7", 100);
  ASSERT_TRUE(r2.ok());
  ASSERT_TRUE(server->Command({"DEL", "sluice:{key%3A7}:tokens:u:" + r2->id}).ok());
  auto gone = l->SettleUsage("key:7", r2->id, 1);
  EXPECT_EQ(gone.status().code(), ErrorCode::kNotFound) << gone.status().ToString();
  EXPECT_NE(gone.status().message().find(r2->id), std::string::npos) << gone.status().message();
  EXPECT_EQ(l->Peek("key:7")->remaining, 550u);
}

TEST(RedisOverage, BadInput) {
  RedisServer* server = SharedRedis();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Command({"FLUSHALL"}).ok());
  auto l = Make(*server, {Charging(Policy::Gcra("g", 10, std::chrono::seconds(1), 10), 0),
                          Policy::SlidingWindowLog("log", 5, std::chrono::seconds(1))});
  const std::string unknown(kPermitIdLength, 'f');
  auto s = l->SettleUsage("k", unknown, 1);
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound) << s.status().ToString();
  EXPECT_NE(s.status().message().find(unknown), std::string::npos) << s.status().message();
  EXPECT_EQ(l->SettleUsage("k", "x", 1).status().code(), ErrorCode::kInvalidArgument);
  // The charging GCRA takes up to 2^32; the log (overage reject) its capacity of 5.
  auto big = l->Acquire("k", kMaxChargeCost + 1);
  EXPECT_EQ(big.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("4294967297"), std::string::npos) << big.status().message();
  EXPECT_EQ(l->Acquire("k", 6).status().code(), ErrorCode::kInvalidArgument);
  const Check report[] = {{0, "k", kMaxChargeCost}};
  auto d = l->Acquire(report);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->charged, 20u);  // capacity 10 + debt 10
  auto r = l->ReserveUsage("k", 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(l->SettleUsage("k", r->id, 6).status().code(), ErrorCode::kInvalidArgument)
      << "an actual above the log's capacity";
  EXPECT_EQ(l->ReserveUsage("k", 1, -5).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::testing
