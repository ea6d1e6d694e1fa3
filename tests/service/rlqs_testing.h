// What the RLQS tests (rlqs_session_test.cc, rlqs_store_test.cc) share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "service/engine.h"
#include "service/rlqs_session.h"

namespace sluice::service {

inline constexpr Micros kSec = 1'000'000;
// On a minute boundary, so a minute window ends 60 s later.
inline constexpr Micros kNoon = 1785412800LL * kSec;

using Reports = rlqs_pb::RateLimitQuotaUsageReports;
using Response = rlqs_pb::RateLimitQuotaResponse;

// Units left in the store for the bucket {name: api} of domain "edge": the largest cost
// it allows now, from `most` down (found by taking it, so the store is then empty).
inline long StoreLeft(Engine& engine, long most) {
  for (long n = most; n > 0; --n) {
    RateLimitRequest req;
    req.domain = "edge";
    req.descriptors.resize(1);
    req.descriptors[0].entries = {Entry{"name", "api"}};
    req.descriptors[0].has_hits_addend = true;
    req.descriptors[0].hits_addend = static_cast<std::uint64_t>(n);
    RateLimitResponse r;
    EXPECT_TRUE(engine.ShouldRateLimit(req, &r).ok());
    if (r.overall_code == Code::kOk) return n;
  }
  return 0;
}

}  // namespace sluice::service
