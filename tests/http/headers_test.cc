// Header formatting against the examples of draft-ietf-httpapi-ratelimit-headers-10,
// the policy -> q/w mapping, and Retry-After never earlier than the announced reset.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "http/internal.h"

namespace sluice::http::internal {
namespace {

using std::chrono::seconds;

// The draft writes some lists with "," and some with ", " between members; RFC 9651
// serialises ", ". Compare modulo that one optional space.
std::string NoSpaceAfterComma(std::string s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    out.push_back(s[i]);
    if (s[i] == ',' && i + 1 < s.size() && s[i + 1] == ' ') ++i;
  }
  return out;
}

std::string PolicyField(std::initializer_list<PolicyItem> items) {
  return FormatRateLimitPolicy(std::span<const PolicyItem>(items.begin(), items.size()));
}
std::string LimitField(std::initializer_list<LimitItem> items) {
  return FormatRateLimit(std::span<const LimitItem>(items.begin(), items.size()));
}

TEST(DraftExamples, RateLimitPolicy) {
  // Section 3.2.
  EXPECT_EQ(PolicyField({{"default", {100, 10}}}), "\"default\";q=100;w=10");
  EXPECT_EQ(NoSpaceAfterComma(PolicyField({{"permin", {50, 60}}, {"perhr", {1000, 3600}}})),
            "\"permin\";q=50;w=60,\"perhr\";q=1000;w=3600");
  // Section 3.
  EXPECT_EQ(NoSpaceAfterComma(PolicyField({{"burst", {100, 60}}, {"daily", {1000, 86400}}})),
            "\"burst\";q=100;w=60,\"daily\";q=1000;w=86400");
  // Appendix B.3.2, written exactly as RFC 9651 serialises.
  EXPECT_EQ(PolicyField({{"hour", {1000, 3600}}, {"day", {5000, 86400}}}),
            "\"hour\";q=1000;w=3600, \"day\";q=5000;w=86400");
  // Appendix B.1.3 / B.2.1.
  EXPECT_EQ(PolicyField({{"basic", {100, 60}}}), "\"basic\";q=100;w=60");
  EXPECT_EQ(PolicyField({{"fixedwindow", {100, 60}}}), "\"fixedwindow\";q=100;w=60");
}

TEST(DraftExamples, RateLimit) {
  // Sections 4 and 4.2.
  EXPECT_EQ(LimitField({{"default", 50, 30}}), "\"default\";r=50;t=30");
  // Appendix B.1.3, B.2.1, B.2.3, B.3, section 6.
  EXPECT_EQ(LimitField({{"basic", 60, 58}}), "\"basic\";r=60;t=58");
  EXPECT_EQ(LimitField({{"fixedwindow", 99, 50}}), "\"fixedwindow\";r=99;t=50");
  EXPECT_EQ(LimitField({{"dynamic", 0, 20}}), "\"dynamic\";r=0;t=20");
  EXPECT_EQ(LimitField({{"dynamic", 15, 40}}), "\"dynamic\";r=15;t=40");
  EXPECT_EQ(LimitField({{"problemPolicy", 0, 10}}), "\"problemPolicy\";r=0;t=10");
  EXPECT_EQ(LimitField({{"dayLimit", 100, 36000}}), "\"dayLimit\";r=100;t=36000");
}

TEST(SfString, EscapesAndDropsNonPrintable) {
  std::string out;
  AppendSfString(out, "a\"b\\c\x01\xff");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\"");
}

TEST(SfInteger, ClampedToTheLargestSfInteger) {
  EXPECT_EQ(LimitField({{"p", ~0ULL, INT64_MAX}}), "\"p\";r=999999999999999;t=999999999999999");
}

TEST(Json, Escapes) {
  std::string out;
  AppendJsonString(out, "a\"b\\c\n\x01");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\u0001\"");
}

TEST(QuotaWindow, WindowAlgorithmsAdvertiseLimitPerWindow) {
  auto fw = PolicyQuotaWindow(Policy::FixedWindow("default", 100, seconds(10)));
  EXPECT_EQ(fw.q, 100u);
  EXPECT_EQ(fw.w, 10);
  auto swc = PolicyQuotaWindow(Policy::SlidingWindowCounter("permin", 50, std::chrono::minutes(1)));
  EXPECT_EQ(swc.q, 50u);
  EXPECT_EQ(swc.w, 60);
  auto log = PolicyQuotaWindow(Policy::SlidingWindowLog("perhr", 1000, std::chrono::hours(1)));
  EXPECT_EQ(log.q, 1000u);
  EXPECT_EQ(log.w, 3600);
  // Sub-second windows round up to 1 s (w is a non-zero integer).
  auto sub = PolicyQuotaWindow(Policy::FixedWindow("fast", 5, std::chrono::milliseconds(500)));
  EXPECT_EQ(sub.q, 5u);
  EXPECT_EQ(sub.w, 1);
}

TEST(QuotaWindow, BucketsAdvertiseCapacityOverItsRefillTime) {
  // 20 tokens, 10 refilled per second: the full 20 take 2 s.
  auto tb = PolicyQuotaWindow(Policy::TokenBucket("tb", 20, 10, seconds(1)));
  EXPECT_EQ(tb.q, 20u);
  EXPECT_EQ(tb.w, 2);
  // burst == limit: exactly limit per window.
  auto g = PolicyQuotaWindow(Policy::Gcra("g", 100, std::chrono::minutes(1), 100));
  EXPECT_EQ(g.q, 100u);
  EXPECT_EQ(g.w, 60);
  // 5/s with burst 1: 0.2 s, rounded up.
  auto g1 = PolicyQuotaWindow(Policy::Gcra("g1", 5, seconds(1), 1));
  EXPECT_EQ(g1.q, 1u);
  EXPECT_EQ(g1.w, 1);
  // 1000/day with burst 10: 864 s.
  auto g2 = PolicyQuotaWindow(Policy::Gcra("g2", 1000, std::chrono::hours(24), 10));
  EXPECT_EQ(g2.q, 10u);
  EXPECT_EQ(g2.w, 864);
}

TEST(Seconds, RoundUp) {
  EXPECT_EQ(CeilSeconds(-5), 0);
  EXPECT_EQ(CeilSeconds(0), 0);
  EXPECT_EQ(CeilSeconds(1), 1);
  EXPECT_EQ(CeilSeconds(1'000'000), 1);
  EXPECT_EQ(CeilSeconds(1'000'001), 2);
  EXPECT_EQ(CeilSeconds(59'999'999), 60);
}

TEST(Reset, AllowedAnnouncesFullResetDeniedAnnouncesRetry) {
  Decision allowed{.allowed = true, .limit = 10, .remaining = 3, .reset_after = 42'500'000};
  EXPECT_EQ(ResetSeconds(allowed), 43);
  Decision denied{.allowed = false,
                  .limit = 10,
                  .remaining = 0,
                  .reset_after = 60'000'000,
                  .retry_after = 5'000'001};
  EXPECT_EQ(ResetSeconds(denied), 6);
  EXPECT_EQ(RetryAfterSeconds(denied), 6);
  // A denial never announces 0 s.
  Decision odd{.allowed = false, .limit = 10, .remaining = 0};
  EXPECT_EQ(ResetSeconds(odd), 1);
  EXPECT_EQ(RetryAfterSeconds(odd), 1);
}

TEST(Reset, RetryAfterNeverEarlierThanAnnouncedReset) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    Decision d;
    d.allowed = false;
    d.limit = 1 + rng() % 1000;
    d.remaining = rng() % (d.limit + 1);
    d.reset_after = static_cast<Micros>(rng() % 100'000'000);
    d.retry_after = static_cast<Micros>(rng() % 100'000'000);
    const std::int64_t ra = RetryAfterSeconds(d);
    EXPECT_GE(ra, ResetSeconds(d));
    EXPECT_GE(ra * 1'000'000, d.retry_after);  // rounded up, never down
    EXPECT_GE(ra, 1);
  }
}

}  // namespace
}  // namespace sluice::http::internal
