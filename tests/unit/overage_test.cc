// Usage charged after the fact (issue #21 item 3): the store protocol's validation of
// overage costs, usage reservation ids and settles (ValidateBatch); overage charges and
// reserve/settle on the in-process store with a ManualClock.
#include <gtest/gtest.h>

#include <string>

#include "sluice/policy.h"
#include "sluice/store.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

constexpr std::string_view kId = "0123456789abcdef0123456789abcdef";

Status Validate(StoreOp op, const StoreCheck& c) {
  return ValidateBatch(StoreBatch{.op = op, .checks = std::span<const StoreCheck>(&c, 1)});
}

void ExpectInvalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(OverageValidation, ChargePoliciesTakeCostsAboveTheCapacityUpTo2To32) {
  Policy p = Policy::FixedWindow("tok", 1000, std::chrono::minutes(1));
  StoreCheck c{.policy = &p, .key = "k", .cost = 5000};
  ExpectInvalid(Validate(StoreOp::kDecide, c), "exceeds the capacity 1000");
  p.overage = Overage::kCharge;
  EXPECT_TRUE(Validate(StoreOp::kDecide, c).ok());
  c.cost = kMaxChargeCost;
  EXPECT_TRUE(Validate(StoreOp::kDecide, c).ok());
  c.cost = kMaxChargeCost + 1;
  ExpectInvalid(Validate(StoreOp::kDecide, c),
                "cost 4294967297 of policy 'tok' (overage charge) exceeds 4294967296");
  p.overage = Overage::kDrain;
  ExpectInvalid(Validate(StoreOp::kDecide, c), "(overage drain) exceeds 4294967296");
  // Refunds and penalties keep their range (1..capacity).
  p.overage = Overage::kCharge;
  c.cost = 1001;
  ExpectInvalid(Validate(StoreOp::kRefund, c), "must be 1-1000");
}

TEST(OverageValidation, AWaitingReservationNeedsOverageReject) {
  Policy p = Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1));
  p.overage = Overage::kCharge;
  StoreCheck c{.policy = &p, .key = "k", .cost = 1, .max_wait = 1000};
  ExpectInvalid(Validate(StoreOp::kDecide, c), "needs overage reject");
}

TEST(OverageValidation, UsageIdsAndRecordLifetimes) {
  Policy p = Policy::Gcra("g", 10, std::chrono::seconds(1), 5);
  StoreCheck c{.policy = &p, .key = "k", .cost = 2, .usage_id = kId, .usage_ttl = 60'000'000};
  EXPECT_TRUE(Validate(StoreOp::kDecide, c).ok());
  EXPECT_TRUE(Validate(StoreOp::kSettle, c).ok());
  c.usage_ttl = 999;
  ExpectInvalid(Validate(StoreOp::kDecide, c), "must be kept 1ms to 366 days (got 999us)");
  EXPECT_TRUE(Validate(StoreOp::kSettle, c).ok());  // a settle does not set the lifetime
  c.usage_ttl = 60'000'000;
  c.usage_id = "0123456789ABCDEF0123456789ABCDEF";
  ExpectInvalid(Validate(StoreOp::kDecide, c),
                "usage reservation id '0123456789ABCDEF0123456789ABCDEF' of policy 'g' must be 32 "
                "lower-case hex characters");
  c.usage_id = "";
  ExpectInvalid(Validate(StoreOp::kSettle, c), "usage reservation id '' of policy 'g'");
  c.usage_id = kId;
  c.max_wait = 10;
  ExpectInvalid(Validate(StoreOp::kDecide, c), "cannot wait");
  c.max_wait = 0;
  // A settle's actual usage is a cost: up to MaxCost() (0 settles to nothing used).
  c.cost = 0;
  EXPECT_TRUE(Validate(StoreOp::kSettle, c).ok());
  c.cost = 6;
  ExpectInvalid(Validate(StoreOp::kSettle, c), "exceeds the capacity 5");
  Policy conc = Policy::Concurrency("c", 2, std::chrono::seconds(1));
  c = StoreCheck{.policy = &conc, .key = "k", .cost = 0, .usage_id = kId, .usage_ttl = 1000};
  ExpectInvalid(Validate(StoreOp::kSettle, c), "usage reservations apply to rates only");
}

Policy Charging(Policy p, std::uint64_t max_debt = 0) {
  p.overage = Overage::kCharge;
  p.max_debt = max_debt;
  return p;
}

Policy Draining(Policy p) {
  p.overage = Overage::kDrain;
  return p;
}

// The report: 5000 tokens against 1000 left. Under reject it is denied and
// takes nothing (the budget leaks); under charge it is denied and taken up to the debt
// bound, so the next request is refused until the debt is repaid.
TEST(Overage, ChargeTakesADeniedReportUpToTheDebtBound) {
  Harness reject({Policy::FixedWindow("tpm", 1000, std::chrono::minutes(1))});
  EXPECT_EQ(reject.limiter->Acquire("k", 5000).status().code(), ErrorCode::kInvalidArgument);

  Harness h({Charging(Policy::FixedWindow("tpm", 1000, std::chrono::minutes(1)), 3000)});
  Decision d = h.Take("k", 5000);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.charged, 4000u);  // capacity 1000 + max_debt 3000; 1000 dropped
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_GT(d.retry_after, 0);
  EXPECT_FALSE(h.Take("k", 1).allowed);
  // A further report is dropped whole: the key is at its bound.
  d = h.Take("k", 10);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.charged, 0u);
  // The fixed window forgives at its end.
  h.clock->Advance(kMin);
  EXPECT_TRUE(h.Take("k", 1).allowed);
}

TEST(Overage, ChargeRepaysDebtByRefillInTokenBucketAndGcra) {
  for (Policy p : {Policy::TokenBucket("b", 10, 10, std::chrono::seconds(10)),
                   Policy::Gcra("g", 10, std::chrono::seconds(10), 10)}) {
    Harness h({Charging(p)});  // max_debt 0 = capacity 10
    Decision d = h.Take("k", 15);
    EXPECT_FALSE(d.allowed) << p.name;
    EXPECT_EQ(d.charged, 15u) << p.name;  // usage 15 <= 10 + 10
    d = h.Take("k", 50);
    EXPECT_EQ(d.charged, 5u) << p.name;  // up to the bound of 20
    // Usage 20 of capacity 10 at 1/s: a request of cost 1 passes after 11 s, not 10.
    // (A peek: a denied request of a charging policy would itself be charged.)
    h.clock->Advance(10 * kSec);
    EXPECT_FALSE(h.limiter->Peek("k")->allowed) << p.name;
    h.clock->Advance(1 * kSec);
    EXPECT_TRUE(h.Take("k", 1).allowed) << p.name;
  }
}

TEST(Overage, DrainTakesWhatRemainsInEveryAlgorithm) {
  const std::vector<Policy> all = {Policy::FixedWindow("f", 10, std::chrono::minutes(1)),
                                   Policy::SlidingWindowCounter("c", 10, std::chrono::minutes(1)),
                                   Policy::SlidingWindowLog("l", 10, std::chrono::minutes(1)),
                                   Policy::TokenBucket("b", 10, 1, std::chrono::minutes(1)),
                                   Policy::Gcra("g", 10, std::chrono::minutes(1), 10)};
  for (const Policy& p : all) {
    Harness h({Draining(p)});
    EXPECT_TRUE(h.Take("k", 7).allowed) << p.name;
    const Decision d = h.Take("k", 5);
    EXPECT_FALSE(d.allowed) << p.name;
    EXPECT_EQ(d.charged, 3u) << p.name;
    EXPECT_EQ(d.remaining, 0u) << p.name;
    // Exactly at the capacity: nothing more is taken.
    EXPECT_EQ(h.Take("k", 1).charged, 0u) << p.name;
  }
}

TEST(Overage, ChargeInEveryAlgorithmStaysWithinCapacityPlusDebt) {
  const std::vector<Policy> all = {Policy::FixedWindow("f", 10, std::chrono::minutes(1)),
                                   Policy::SlidingWindowCounter("c", 10, std::chrono::minutes(1)),
                                   Policy::SlidingWindowLog("l", 10, std::chrono::minutes(1)),
                                   Policy::TokenBucket("b", 10, 1, std::chrono::minutes(1)),
                                   Policy::Gcra("g", 10, std::chrono::minutes(1), 10)};
  for (const Policy& p : all) {
    Harness h({Charging(p, 4)});
    std::uint64_t taken = 0;
    for (int i = 0; i < 5; ++i) {
      const Decision d = h.Take("k", 3);
      taken += d.allowed ? 3 : d.charged;
    }
    EXPECT_EQ(taken, 14u) << p.name;  // 3+3+3 allowed, then 3 and 2 charged: 10 + 4
    EXPECT_EQ(h.Take("k", 1).charged, 0u) << p.name;
  }
}

TEST(Overage, PeeksNeverChargeAndRejectIsUnchanged) {
  Harness h({Charging(Policy::FixedWindow("f", 2, std::chrono::minutes(1)))});
  EXPECT_TRUE(h.Take("k", 2).allowed);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(h.limiter->Peek("k")->charged, 0u);
  EXPECT_EQ(h.Take("k", 1).charged, 1u);  // the peeks took nothing: usage was 2

  Harness r({Policy::FixedWindow("f", 2, std::chrono::minutes(1))});
  EXPECT_TRUE(r.Take("k", 2).allowed);
  const Decision d = r.Take("k", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.charged, 0u);
}

// A batch is all or nothing for `allowed`; when it is denied, each check of a charging
// policy takes per its own rule (a check that fits takes its whole cost), the others
// nothing.
TEST(Overage, ADeniedBatchChargesOnlyItsChargingChecks) {
  Harness h({Policy::FixedWindow("admit", 1, std::chrono::minutes(1)),
             Charging(Policy::FixedWindow("tokens", 100, std::chrono::minutes(1)))});
  EXPECT_TRUE(h.Take("k", 1).allowed);  // admit now used up; tokens 1
  Decision per[2];
  const Check checks[] = {{0, "k", 1}, {1, "k", 30}};
  auto d = h.limiter->Acquire(checks, per);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_FALSE(per[0].allowed);
  EXPECT_EQ(per[0].charged, 0u);
  EXPECT_FALSE(per[1].allowed);  // the batch was denied
  EXPECT_EQ(per[1].charged, 30u);
  EXPECT_EQ(per[1].remaining, 69u);
}

TEST(Overage, ABlockedKeyIsChargedAndStaysBlocked) {
  Policy p = Charging(Policy::FixedWindow("f", 2, std::chrono::minutes(1)));
  p.block_for = 10 * kMin;
  Harness h({p});
  EXPECT_TRUE(h.Take("k", 2).allowed);
  Decision d = h.Take("k", 1);  // denied: starts the block, and is charged
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.charged, 1u);
  EXPECT_GE(d.retry_after, 10 * kMin - 1);
  h.clock->Advance(kMin);  // a new window: budget back, but blocked
  d = h.Take("k", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.charged, 1u);
  EXPECT_GE(d.retry_after, 9 * kMin - 1);
}

TEST(UsageReservation, SettleRefundsOrChargesTheDifferenceOnce) {
  Harness h({Charging(Policy::FixedWindow("tpm", 1000, std::chrono::minutes(1)))});
  auto r = h.limiter->ReserveUsage("k", 500);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->decision.allowed);
  ASSERT_EQ(r->id.size(), kPermitIdLength);
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 500u);
  // Used 200 of the 500: 300 come back.
  auto s = h.limiter->SettleUsage("k", r->id, 200);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->already_settled);
  EXPECT_TRUE(s->decision.allowed);
  EXPECT_EQ(s->decision.remaining, 800u);
  // A retry (a timeout, a crash) changes nothing.
  s = h.limiter->SettleUsage("k", r->id, 200);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->already_settled);
  EXPECT_EQ(s->decision.remaining, 800u);
  s = h.limiter->SettleUsage("k", r->id, 900);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->already_settled);
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 800u);

  // Used more than reserved, beyond what is left: charged per overage.
  auto r2 = h.limiter->ReserveUsage("k", 100);
  ASSERT_TRUE(r2.ok());
  s = h.limiter->SettleUsage("k", r2->id, 1500);  // 1400 more, 700 left
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->decision.charged, 1400u);
  EXPECT_EQ(s->decision.remaining, 0u);
  EXPECT_FALSE(h.Take("k", 1).allowed);
}

TEST(UsageReservation, RejectPolicyTakesTheRestOnlyIfItFits) {
  Harness h({Policy::FixedWindow("f", 10, std::chrono::minutes(1))});
  auto r = h.limiter->ReserveUsage("k", 4);
  ASSERT_TRUE(r.ok());
  auto s = h.limiter->SettleUsage("k", r->id, 6);  // 2 more: fits
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->decision.remaining, 4u);
  auto r2 = h.limiter->ReserveUsage("k", 4);
  ASSERT_TRUE(r2.ok());
  s = h.limiter->SettleUsage("k", r2->id, 9);  // 5 more, none left: not taken
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->decision.allowed);  // applied (the rest was decided and denied)
  EXPECT_EQ(s->decision.charged, 0u);
  EXPECT_EQ(s->decision.remaining, 0u);
}

TEST(UsageReservation, ASettleAfterItsWindowAppliesToTheCurrentWindow) {
  Harness h({Charging(Policy::FixedWindow("f", 10, std::chrono::minutes(1)))});
  auto r = h.limiter->ReserveUsage("k", 8);
  ASSERT_TRUE(r.ok());
  h.clock->Advance(kMin);  // the next window: the reservation's 8 are gone with it
  auto s = h.limiter->SettleUsage("k", r->id, 2);  // refund 6 to a window that has 0
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->decision.remaining, 10u);  // nothing minted
  auto r2 = h.limiter->ReserveUsage("k", 1);
  ASSERT_TRUE(r2.ok());
  h.clock->Advance(kMin);
  s = h.limiter->SettleUsage("k", r2->id, 4);  // 3 more, charged to this window
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->decision.remaining, 7u);
}

TEST(UsageReservation, UnknownExpiredAndBadIdsAreClearErrors) {
  Harness h({Policy::FixedWindow("f", 10, std::chrono::minutes(1))});
  const std::string unknown(kPermitIdLength, 'a');
  auto s = h.limiter->SettleUsage("k", unknown, 1);
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(s.status().message().find("'" + unknown + "'"), std::string::npos)
      << s.status().message();
  s = h.limiter->SettleUsage("k", "not-an-id", 1);
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("'not-an-id'"), std::string::npos);
  auto r = h.limiter->ReserveUsage("k", 3, 2 * kSec);
  ASSERT_TRUE(r.ok());
  h.clock->Advance(2 * kSec);
  s = h.limiter->SettleUsage("k", r->id, 1);
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound) << "expired";
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 7u);  // nothing settled
  // The settle of another key does not find it.
  auto r2 = h.limiter->ReserveUsage("k", 3);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(h.limiter->SettleUsage("other", r2->id, 1).status().code(), ErrorCode::kNotFound);
  // Costs above 2^32 on a charging policy, and above the capacity otherwise.
  EXPECT_EQ(h.limiter->SettleUsage("k", r2->id, 11).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->ReserveUsage("k", 3, 999).status().code(), ErrorCode::kInvalidArgument);
  Harness c({Charging(Policy::FixedWindow("f", 10, std::chrono::minutes(1)))});
  auto big = c.limiter->Acquire("k", kMaxChargeCost + 1);
  EXPECT_EQ(big.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("4294967297"), std::string::npos);
  EXPECT_TRUE(c.limiter->Acquire("k", kMaxChargeCost).ok());
}

}  // namespace
}  // namespace sluice::testing
