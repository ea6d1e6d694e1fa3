// Usage charged after the fact (issue #21 item 3): the store protocol's validation of
// overage costs, usage reservation ids and settles (ValidateBatch).
#include <gtest/gtest.h>

#include <string>

#include "sluice/policy.h"
#include "sluice/store.h"

namespace sluice {
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

}  // namespace
}  // namespace sluice
