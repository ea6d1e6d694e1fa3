#include "sluice/policy.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

Policy Good() {
  return Policy::SlidingWindowCounter("api", 100, std::chrono::minutes(1));
}

void ExpectInvalid(const Policy& p, const std::string& needle) {
  Status s = ValidatePolicy(p);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(ValidatePolicy, AcceptsEveryConstructor) {
  EXPECT_TRUE(ValidatePolicy(Good()).ok());
  EXPECT_TRUE(ValidatePolicy(Policy::FixedWindow("a", 1, std::chrono::seconds(1))).ok());
  EXPECT_TRUE(ValidatePolicy(Policy::SlidingWindowLog("a", 10, std::chrono::seconds(1))).ok());
  EXPECT_TRUE(ValidatePolicy(Policy::TokenBucket("a", 10, 1, std::chrono::seconds(2))).ok());
  EXPECT_TRUE(ValidatePolicy(Policy::Gcra("a", 10, std::chrono::seconds(1), 3)).ok());
}

// A bucket's refill from empty (GCRA: tau) is at most 366 days, the longest window:
// beyond it a TAT or a refill time leaves the range of a microsecond clock.
TEST(ValidatePolicy, BoundsTheTimeABucketTakesToRefill) {
  using std::chrono::hours;
  for (const auto make :
       {+[](std::uint64_t burst) { return Policy::TokenBucket("b", burst, 1, hours(24)); },
        +[](std::uint64_t burst) { return Policy::Gcra("g", 1, hours(24), burst); }}) {
    EXPECT_TRUE(ValidatePolicy(make(366)).ok());
    const Policy p = make(367);
    ExpectInvalid(p, "time to refill from empty) must be at most 366 days (got 367 days)");
    // a burst of 10^12 at one a day: the refill time overflowed microseconds
    ExpectInvalid(make(1'000'000'000'000ULL), "time to refill");
  }
  Policy p = Policy::Gcra("g", 1'000'000'000'000ULL, std::chrono::seconds(1), 1'000'000'000'000ULL);
  EXPECT_TRUE(ValidatePolicy(p).ok());
}

TEST(ValidatePolicy, NamesTheBadField) {
  Policy p = Good();
  p.name = "";
  ExpectInvalid(p, "name");
  p = Good();
  p.name = "has space";
  ExpectInvalid(p, "name");
  p = Good();
  p.name = std::string(65, 'a');
  ExpectInvalid(p, "name");
  p = Good();
  p.limit = 0;
  ExpectInvalid(p, "limit");
  p = Good();
  p.limit = 2'000'000'000'000ULL;
  ExpectInvalid(p, "limit");
  p = Good();
  p.window = 0;
  ExpectInvalid(p, "window");
  p = Good();
  p.window = -5;
  ExpectInvalid(p, "window");
  p = Good();
  p.window = 999;
  ExpectInvalid(p, "window");
  p = Good();
  p.window = 400LL * 24 * 3600 * 1'000'000;
  ExpectInvalid(p, "window");
  p = Good();
  p.burst = 5;
  ExpectInvalid(p, "burst");
  p = Policy::Gcra("g", 10, std::chrono::seconds(1), 3'000'000'000'000ULL);
  ExpectInvalid(p, "burst");
  p = Good();
  p.initial_tokens = 1;
  ExpectInvalid(p, "initial_tokens");
  p = Policy::TokenBucket("b", 10, 1, std::chrono::seconds(1));
  p.initial_tokens = 11;
  ExpectInvalid(p, "initial_tokens");
  p = Good();
  p.fallback_divisor = 0;
  ExpectInvalid(p, "fallback_divisor");
  p = Policy::SlidingWindowLog("l", 2'000'000, std::chrono::seconds(1));
  ExpectInvalid(p, "sliding_window_log");
  p = Good();
  p.algorithm = static_cast<Algorithm>(9);
  ExpectInvalid(p, "algorithm");
}

TEST(ParseRate, Forms) {
  auto r = ParseRate("100/min");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->limit, 100u);
  EXPECT_EQ(r->window, 60'000'000);
  r = ParseRate("0.5/s");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->limit, 1u);
  EXPECT_EQ(r->window, 2'000'000);
  r = ParseRate("2.5/10s");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->limit, 5u);
  EXPECT_EQ(r->window, 20'000'000);
  r = ParseRate(" 1000 / day ");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->limit, 1000u);
  EXPECT_EQ(r->window, 86'400'000'000);
  for (const char* bad :
       {"", "100", "abc/s", "10/fortnight", "0/s", "1.2345678/s", "-1/s", "5/", "15/0s", "1/0ms"}) {
    auto b = ParseRate(bad);
    EXPECT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(ParseDuration, Forms) {
  EXPECT_EQ(*ParseDuration("250ms"), 250'000);
  EXPECT_EQ(*ParseDuration("1s"), 1'000'000);
  EXPECT_EQ(*ParseDuration("10m"), 600'000'000);
  EXPECT_EQ(*ParseDuration("2 hours"), 7'200'000'000);
  EXPECT_EQ(*ParseDuration("1d"), 86'400'000'000);
  EXPECT_FALSE(ParseDuration("10").ok());
  EXPECT_FALSE(ParseDuration("s5").ok());
  EXPECT_FALSE(ParseDuration("99999999999999999999s").ok());
}

TEST(Names, RoundTrip) {
  for (int i = 0; i < 5; ++i) {
    auto a = static_cast<Algorithm>(i);
    EXPECT_EQ(*ParseAlgorithm(AlgorithmName(a)), a);
  }
  for (int i = 0; i < 3; ++i) {
    auto m = static_cast<FailureMode>(i);
    EXPECT_EQ(*ParseFailureMode(FailureModeName(m)), m);
  }
  EXPECT_NE(ParseAlgorithm("leaky").status().message().find("leaky"), std::string::npos);
}

TEST(Overage, NamesRoundTripAndUnknownIsNamed) {
  for (Overage o : {Overage::kReject, Overage::kCharge, Overage::kDrain}) {
    EXPECT_EQ(*ParseOverage(OverageName(o)), o);
  }
  EXPECT_STREQ(OverageName(Overage::kCharge), "charge");
  const Status s = ParseOverage("always").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'always'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reject, charge or drain"), std::string::npos) << s.message();
}

TEST(Overage, DefaultIsRejectAndDebtBoundDefaultsToCapacity) {
  Policy p = Policy::TokenBucket("t", 50, 10, std::chrono::seconds(1));
  EXPECT_EQ(p.overage, Overage::kReject);
  EXPECT_EQ(p.DebtBound(), 0u);
  EXPECT_EQ(p.MaxCost(), 50u);
  p.overage = Overage::kCharge;
  EXPECT_EQ(p.DebtBound(), 50u);  // max_debt 0 = the capacity (burst)
  EXPECT_EQ(p.MaxCost(), kMaxChargeCost);
  p.max_debt = 7;
  EXPECT_EQ(p.DebtBound(), 7u);
  EXPECT_TRUE(ValidatePolicy(p).ok()) << ValidatePolicy(p).message();
  p.overage = Overage::kDrain;
  p.max_debt = 0;
  EXPECT_EQ(p.DebtBound(), 0u);  // drain takes what remains: no debt
  EXPECT_TRUE(ValidatePolicy(p).ok());
  // A capacity above 2^32 stays the bound of what one check may cost.
  Policy big = Policy::FixedWindow("b", 10'000'000'000ULL, std::chrono::seconds(1));
  big.overage = Overage::kCharge;
  EXPECT_EQ(big.MaxCost(), 10'000'000'000ULL);
}

TEST(Overage, ValidationNamesWhatIsWrong) {
  Policy p = Good();
  p.max_debt = 5;  // overage reject
  ExpectInvalid(p, "max_debt applies to overage charge only");
  p = Good();
  p.overage = Overage::kDrain;
  p.max_debt = 5;
  ExpectInvalid(p, "max_debt applies to overage charge only");
  p = Good();
  p.overage = static_cast<Overage>(9);
  ExpectInvalid(p, "overage is not a known mode");
  p = Good();
  p.overage = Overage::kCharge;
  p.max_debt = 2'000'000'000'000ULL;
  ExpectInvalid(p, "max_debt must be at most 10^12");
  p = Policy::Concurrency("c", 3, std::chrono::seconds(5));
  p.overage = Overage::kCharge;
  ExpectInvalid(p, "overage (and max_debt) do not apply to concurrency");
  p = Good();
  p.overage = Overage::kCharge;
  p.lease = 5;
  ExpectInvalid(p, "cannot be combined with lease");
  // A sliding log holds its debt as entries: at most its limit.
  p = Policy::SlidingWindowLog("l", 10, std::chrono::seconds(1));
  p.overage = Overage::kCharge;
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.max_debt = 11;
  ExpectInvalid(p, "max_debt of a sliding_window_log must be at most its limit (10, got 11)");
  // A bucket repays at limit/window: 1 per day cannot repay 400 units within 366 days.
  p = Policy::TokenBucket("t", 10, 1, std::chrono::hours(24));
  p.overage = Overage::kCharge;
  p.max_debt = 366;
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.max_debt = 400;
  ExpectInvalid(p, "would take more than 366 days to repay");
  // A window algorithm forgives the debt at its window's end: any bound up to 10^12.
  p = Policy::FixedWindow("f", 1, std::chrono::hours(24));
  p.overage = Overage::kCharge;
  p.max_debt = 1'000'000'000'000ULL;
  EXPECT_TRUE(ValidatePolicy(p).ok());
}

}  // namespace
}  // namespace sluice
