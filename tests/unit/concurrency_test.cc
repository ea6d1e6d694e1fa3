// Concurrency limits (issue #12 item 1): the core algorithm over a plain permit set,
// and Limiter::AcquirePermit / sluice::Permit over a MemoryStore on a ManualClock.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/algorithms.h"
#include "sluice/permit.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

core::PermitId Id(std::uint64_t n) {
  return core::PermitId{0, n};
}

struct Core {
  Policy p = Policy::Concurrency("c", 3, std::chrono::seconds(10));
  core::PermitSet set;
  Micros expires = 0;
  // One operation of the core: kDecide acquires (cost 1) or peeks (cost 0).
  Decision Do(Micros now, std::uint64_t id, StoreOp op, std::uint64_t cost = 1) {
    if (op == StoreOp::kRelease) return core::ConcurrencyRelease(p, set, now, Id(id), &expires);
    if (op == StoreOp::kExtend) return core::ConcurrencyExtend(p, set, now, Id(id), &expires);
    return core::Concurrency(p, set, now, Id(id), cost, /*commit=*/true, &expires);
  }
};

TEST(ConcurrencyCore, AcquiresUpToTheLimitThenDeniesUntilTheEarliestExpiry) {
  Core c;
  const Micros t0 = kNoon;
  for (std::uint64_t i = 0; i < 3; ++i) {
    const Decision d = c.Do(t0 + static_cast<Micros>(i) * kSec, i, StoreOp::kDecide);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.limit, 3u);
    EXPECT_EQ(d.remaining, 2 - i);
    EXPECT_EQ(d.reset_after, 10 * kSec);
    EXPECT_EQ(d.retry_after, 0);
  }
  EXPECT_EQ(c.expires, t0 + 12 * kSec);
  Decision d = c.Do(t0 + 4 * kSec, 9, StoreOp::kDecide);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_EQ(d.retry_after, 6 * kSec);  // permit 0 expires at t0 + 10 s
  EXPECT_EQ(d.reset_after, 8 * kSec);  // permit 2 at t0 + 12 s
  EXPECT_EQ(c.set.size(), 3u);         // a denial holds nothing
  // A peek says the same and takes nothing.
  d = c.Do(t0 + 4 * kSec, 0, StoreOp::kDecide, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 6 * kSec);
  // At the earliest expiry the slot is free again (expires <= now is gone).
  d = c.Do(t0 + 10 * kSec, 9, StoreOp::kDecide);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
}

TEST(ConcurrencyCore, ReleaseFreesASlotAndSaysWhetherThePermitWasHeld) {
  Core c;
  ASSERT_TRUE(c.Do(kNoon, 1, StoreOp::kDecide).allowed);
  ASSERT_TRUE(c.Do(kNoon, 2, StoreOp::kDecide).allowed);
  Decision d = c.Do(kNoon + kSec, 1, StoreOp::kRelease);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2u);
  EXPECT_EQ(d.reset_after, 9 * kSec);                              // permit 2 is left
  EXPECT_FALSE(c.Do(kNoon + kSec, 1, StoreOp::kRelease).allowed);  // released already
  EXPECT_FALSE(c.Do(kNoon + kSec, 7, StoreOp::kRelease).allowed);  // never held
  // Expired: gone, so a release finds nothing and the set is empty.
  d = c.Do(kNoon + 10 * kSec, 2, StoreOp::kRelease);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 3u);
  EXPECT_EQ(d.reset_after, 0);
  EXPECT_EQ(c.expires, kNoon + 10 * kSec);
}

TEST(ConcurrencyCore, ExtendMovesTheExpiryToNowPlusLease) {
  Core c;
  ASSERT_TRUE(c.Do(kNoon, 1, StoreOp::kDecide).allowed);
  ASSERT_TRUE(c.Do(kNoon + kSec, 2, StoreOp::kDecide).allowed);
  Decision d = c.Do(kNoon + 9 * kSec, 1, StoreOp::kExtend);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reset_after, 10 * kSec);
  EXPECT_EQ(c.expires, kNoon + 19 * kSec);
  // Permit 2 expires first now; permit 1 is still held after its first lease.
  EXPECT_FALSE(c.Do(kNoon + 12 * kSec, 2, StoreOp::kExtend).allowed);
  EXPECT_TRUE(c.Do(kNoon + 18 * kSec, 1, StoreOp::kRelease).allowed);
}

TEST(ConcurrencyCore, UncommittedAcquireHoldsNothingUntilCommitted) {
  Core c;
  const Decision d = core::Concurrency(c.p, c.set, kNoon, Id(5), 1, false, &c.expires);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2u);
  EXPECT_EQ(c.set.size(), 0u);
  core::ConcurrencyCommit(c.p, c.set, kNoon, Id(5), &c.expires);
  ASSERT_EQ(c.set.size(), 1u);
  EXPECT_EQ(c.set.LatestExpiry(), kNoon + 10 * kSec);
}

TEST(ConcurrencyCore, PermitIdsParseOnlyAsLowerCaseHex) {
  core::PermitId id;
  EXPECT_TRUE(core::ParsePermitId("0123456789abcdef0000000000000001", &id));
  EXPECT_EQ(id.hi, 0x0123456789abcdefULL);
  EXPECT_EQ(id.lo, 1u);
  EXPECT_FALSE(core::ParsePermitId("0123456789ABCDEF0000000000000001", &id));
  EXPECT_FALSE(core::ParsePermitId("0123456789abcdef000000000000001", &id));
  EXPECT_FALSE(core::ParsePermitId("", &id));
  EXPECT_FALSE(IsPermitId("g123456789abcdef0000000000000001"));
}

TEST(ConcurrencyPolicy, ValidationNamesTheLeaseAndMaxInFlight) {
  Policy p = Policy::Concurrency("c", 10, std::chrono::seconds(0));
  Status s = ValidatePolicy(p);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lease must be more than 0"), std::string::npos) << s.message();
  p.window = -5;
  s = ValidatePolicy(p);
  EXPECT_NE(s.message().find("lease must be more than 0 (got -5us)"), std::string::npos)
      << s.message();
  p.window = 500;
  EXPECT_NE(ValidatePolicy(p).message().find("lease must be at least 1ms"), std::string::npos);
  p = Policy::Concurrency("c", 0, std::chrono::seconds(1));
  EXPECT_NE(ValidatePolicy(p).message().find("max_in_flight must be > 0"), std::string::npos);
  p = Policy::Concurrency("c", 1'000'001, std::chrono::seconds(1));
  EXPECT_NE(ValidatePolicy(p).message().find("max_in_flight must be at most"), std::string::npos);
  p = Policy::Concurrency("c", 5, std::chrono::seconds(1));
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.lease = 2;
  EXPECT_NE(ValidatePolicy(p).message().find("hot-key leases"), std::string::npos);
  EXPECT_EQ(*ParseAlgorithm("concurrency"), Algorithm::kConcurrency);
  EXPECT_STREQ(AlgorithmName(Algorithm::kConcurrency), "concurrency");
  LimiterOptions o;
  o.policies = {Policy::Concurrency("c", 5, std::chrono::microseconds(-1))};
  EXPECT_EQ(Limiter::Create(std::move(o)).status().code(), ErrorCode::kInvalidArgument);
}

const auto kLease = std::chrono::seconds(30);

TEST(Permits, AcquireToTheMaxDenyReleaseAndRaii) {
  Harness h({Policy::Concurrency("inflight", 2, kLease)});
  std::set<std::string> ids;
  {
    auto a = h.limiter->AcquirePermit("k");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(a->held());
    EXPECT_TRUE(IsPermitId(a->id())) << a->id();
    EXPECT_EQ(a->key(), "k");
    EXPECT_EQ(a->decision().remaining, 1u);
    EXPECT_EQ(a->decision().limit, 2u);
    ids.insert(a->id());
    auto b = h.limiter->AcquirePermit("k");
    ASSERT_TRUE(b.ok() && b->held());
    ids.insert(b->id());
    auto c = h.limiter->AcquirePermit("k");
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c->held());
    EXPECT_FALSE(c->decision().allowed);
    EXPECT_EQ(c->decision().retry_after, 30 * kSec);
    EXPECT_EQ(c->Release().code(), ErrorCode::kNotFound);  // a denied permit holds nothing
    // Another key is independent.
    EXPECT_TRUE(h.limiter->AcquirePermit("other")->held());
    // Peek: no free slot.
    auto peek = h.limiter->Peek("k");
    ASSERT_TRUE(peek.ok());
    EXPECT_FALSE(peek->allowed);
    EXPECT_EQ(peek->remaining, 0u);
    ASSERT_TRUE(a->Release().ok());
    EXPECT_FALSE(a->held());
    Status twice = a->Release();
    EXPECT_EQ(twice.code(), ErrorCode::kNotFound);
    EXPECT_NE(twice.message().find(a->id()), std::string::npos) << twice.message();
    EXPECT_EQ(h.limiter->Peek("k")->remaining, 1u);
    auto d = h.limiter->AcquirePermit("k");
    ASSERT_TRUE(d->held());
    ids.insert(d->id());
    EXPECT_EQ(h.limiter->Peek("k")->remaining, 0u);
  }  // b and d are released here
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 2u);
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(h.limiter->Stats().permit_release_errors, 0u);
}

TEST(Permits, APermitNotReleasedExpiresAfterItsLeaseUnlessExtended) {
  Harness h({Policy::Concurrency("inflight", 1, kLease)});
  auto a = h.limiter->AcquirePermit("k");
  ASSERT_TRUE(a->held());
  h.clock->Advance(29 * kSec);
  EXPECT_FALSE(h.limiter->AcquirePermit("k")->held());
  ASSERT_TRUE(a->Extend().ok());  // until t0 + 59 s
  h.clock->Advance(29 * kSec);
  auto denied = h.limiter->AcquirePermit("k");
  EXPECT_FALSE(denied->held());
  EXPECT_EQ(denied->decision().retry_after, 1 * kSec);
  h.clock->Advance(1 * kSec);  // the lease has passed: the slot is free
  auto b = h.limiter->AcquirePermit("k");
  EXPECT_TRUE(b->held());
  Status s = a->Extend();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound) << s.ToString();
  s = a->Release();
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.message().find("expired"), std::string::npos) << s.message();
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 0u);  // b is untouched
}

// Issue #20 item 1 (embedded store): a lease shortened under the same policy name.
// Permits taken under the shorter lease expire before those taken under the longer
// one; each expired permit frees its slot wherever it sits, the key is kept while any
// permit is held (the store's sweep included), and no answer has a negative duration.
TEST(Permits, AShorterLeaseUnderTheSameNameFreesExpiredPermitsAnywhere) {
  Harness h({Policy::Concurrency("pc", 2, std::chrono::seconds(60))});
  auto limiter_with = [&h](Policy p) {
    LimiterOptions o;
    o.policies = {std::move(p)};
    o.store = h.store;
    o.clock = h.clock;
    auto r = Limiter::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  };
  const auto shorter = limiter_with(Policy::Concurrency("pc", 2, std::chrono::seconds(1)));
  const auto one = limiter_with(Policy::Concurrency("pc", 1, std::chrono::seconds(1)));
  const auto no_negative = [](const Decision& d, const char* what) {
    EXPECT_GE(d.retry_after, 0) << what;
    EXPECT_GE(d.reset_after, 0) << what;
  };
  auto a = h.limiter->AcquirePermit("k");
  ASSERT_TRUE(a.ok() && a->held());
  auto b = shorter->AcquirePermit("k");
  ASSERT_TRUE(b.ok() && b->held());
  no_negative(b->decision(), "b");
  EXPECT_EQ(b->decision().reset_after, 60 * kSec);  // a is the last to expire
  h.clock->Advance(1500 * 1000);                    // b's lease has passed, a's has not
  (void)h.store->SweepExpired(h.clock->Now());      // must not drop a's key
  auto c = shorter->AcquirePermit("k");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->held()) << "b expired: its slot is free";
  no_negative(c->decision(), "c");
  EXPECT_EQ(c->decision().reset_after, 58500 * 1000);
  auto d = shorter->AcquirePermit("k");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->held()) << "a and c are held";
  no_negative(d->decision(), "d");
  EXPECT_EQ(d->decision().retry_after, 1 * kSec);  // c expires first
  EXPECT_EQ(d->decision().reset_after, 58500 * 1000);
  auto peek = shorter->Peek("k");
  ASSERT_TRUE(peek.ok());
  EXPECT_EQ(peek->remaining, 0u);
  no_negative(*peek, "peek");
  // The limit lowered to 1 with a and c held: a slot frees when both have expired.
  auto e = one->AcquirePermit("k");
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->held());
  no_negative(e->decision(), "e");
  EXPECT_EQ(e->decision().retry_after, 58500 * 1000);
  EXPECT_TRUE(a->Release().ok());
  EXPECT_TRUE(c->Release().ok());
  EXPECT_TRUE(one->AcquirePermit("k")->held());
}

TEST(Permits, ReleaseAndExtendById) {
  Harness h({Policy::Concurrency("inflight", 1, kLease)});
  auto a = h.limiter->AcquirePermit("k");
  const std::string id = a->Detach();
  EXPECT_FALSE(a->held());
  EXPECT_TRUE(IsPermitId(id));
  a = Permit();  // detached: nothing is released
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 0u);
  EXPECT_TRUE(h.limiter->Extend("k", id).ok());
  EXPECT_EQ(h.limiter->Release("other", id).code(), ErrorCode::kNotFound);
  EXPECT_TRUE(h.limiter->Release("k", id).ok());
  Status twice = h.limiter->Release("k", id);
  EXPECT_EQ(twice.code(), ErrorCode::kNotFound);
  EXPECT_NE(twice.message().find(id), std::string::npos);
  EXPECT_EQ(h.limiter->Extend("k", id).code(), ErrorCode::kNotFound);
  EXPECT_EQ(h.limiter->Release("k", "nothex").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Release("k", std::string(32, 'A')).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Release("", id).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 1u);
}

TEST(Permits, RateAndConcurrencyAreAllOrNothing) {
  Harness h({Policy::Concurrency("inflight", 2, kLease),
             Policy::FixedWindow("rate", 3, std::chrono::minutes(1))});
  Decision per[2];
  auto a = h.limiter->AcquirePermit("k", 1, per);
  ASSERT_TRUE(a->held());
  EXPECT_EQ(per[0].remaining, 1u);
  EXPECT_EQ(per[1].remaining, 2u);
  // The rate policy denies a cost of 3: no slot is taken either.
  auto b = h.limiter->AcquirePermit("k", 3, per);
  EXPECT_FALSE(b->held());
  EXPECT_TRUE(per[0].allowed);
  EXPECT_FALSE(per[1].allowed);
  EXPECT_EQ(h.limiter->Peek("k", per)->remaining, 1u);
  EXPECT_EQ(per[0].remaining, 1u);
  auto c = h.limiter->AcquirePermit("k", 1);
  ASSERT_TRUE(c->held());
  // The concurrency policy denies: no rate unit is taken.
  auto d = h.limiter->AcquirePermit("k", 1, per);
  EXPECT_FALSE(d->held());
  EXPECT_FALSE(per[0].allowed);
  EXPECT_EQ(per[1].remaining, 1u);
  EXPECT_EQ(d->decision().policy_index, 0u);
  ASSERT_TRUE(a->Release().ok());
  EXPECT_TRUE(h.limiter->AcquirePermit("k", 1)->held());  // the last rate unit
  EXPECT_FALSE(h.limiter->AcquirePermit("k", 1)->held());
  // Refund(key) gives back the rate units only.
  EXPECT_TRUE(h.limiter->Refund("k", 1).ok());
  EXPECT_EQ(h.limiter->Refund(std::span<const Check>(std::vector<Check>{{0, "k", 1}})).code(),
            ErrorCode::kInvalidArgument);
}

TEST(Permits, BadUseGivesClearErrors) {
  Harness h({Policy::Concurrency("inflight", 2, kLease)});
  auto plain = h.limiter->Acquire("k");
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(plain.status().message().find("use AcquirePermit"), std::string::npos);
  EXPECT_TRUE(h.limiter->Peek("k").ok());
  EXPECT_EQ(h.limiter->AcquirePermit("k", 0).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->AcquirePermit("").status().code(), ErrorCode::kInvalidArgument);
  Harness rate({Policy::FixedWindow("rate", 3, std::chrono::minutes(1))});
  EXPECT_EQ(rate.limiter->AcquirePermit("k").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rate.limiter->Release("k", std::string(32, 'a')).code(), ErrorCode::kInvalidArgument);
  Permit empty;
  EXPECT_EQ(empty.Release().code(), ErrorCode::kNotFound);
  EXPECT_EQ(empty.Extend().code(), ErrorCode::kNotFound);
  // A store rejects a malformed permit check.
  const Policy p = Policy::Concurrency("c", 2, kLease);
  StoreCheck sc{.policy = &p, .key = "key", .cost = 1};
  Decision out[1];
  EXPECT_EQ(h.store->Run({.checks = std::span<const StoreCheck>(&sc, 1), .now = kNoon}, out).code(),
            ErrorCode::kInvalidArgument);
  sc.permit = "0123456789abcdef0123456789abcdef";
  sc.cost = 2;
  EXPECT_EQ(h.store->Run({.checks = std::span<const StoreCheck>(&sc, 1), .now = kNoon}, out).code(),
            ErrorCode::kInvalidArgument);
  const Policy r = Policy::FixedWindow("r", 2, std::chrono::minutes(1));
  StoreCheck rc{.policy = &r, .key = "key2", .cost = 1};
  EXPECT_EQ(h.store
                ->Run({.op = StoreOp::kRelease,
                       .checks = std::span<const StoreCheck>(&rc, 1),
                       .now = kNoon},
                      out)
                .code(),
            ErrorCode::kInvalidArgument);
}

TEST(Permits, MovingAPermitMovesTheSlotAndAssignmentReleasesTheOld) {
  Harness h({Policy::Concurrency("inflight", 2, kLease)});
  Permit a = std::move(h.limiter->AcquirePermit("k")).value();
  Permit b(std::move(a));
  EXPECT_FALSE(a.held());  // NOLINT: testing the moved-from state
  EXPECT_TRUE(b.held());
  Permit c = std::move(h.limiter->AcquirePermit("k")).value();
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 0u);
  b = std::move(c);  // b's first permit is released
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 1u);
  ASSERT_TRUE(b.Release().ok());
  EXPECT_EQ(h.limiter->Peek("k")->remaining, 2u);
}

TEST(Permits, TheFormWithChecksHoldsEverySlotOfItsKeys) {
  Harness h({Policy::Concurrency("per_ip", 1, kLease), Policy::Concurrency("per_route", 2, kLease),
             Policy::FixedWindow("rate", 10, std::chrono::minutes(1))});
  const Check a[] = {{0, "ip1", 1}, {1, "route", 7}, {2, "ip1", 2}};
  Decision per[3];
  auto p1 = h.limiter->AcquirePermit(a, per);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  ASSERT_TRUE(p1->held());
  EXPECT_EQ(p1->key(), "ip1");
  EXPECT_EQ(per[1].remaining, 1u);  // one slot, whatever the check's cost
  EXPECT_EQ(per[2].remaining, 8u);
  const Check b[] = {{0, "ip2", 1}, {1, "route", 1}};
  auto p2 = h.limiter->AcquirePermit(b);
  ASSERT_TRUE(p2->held());
  const Check c[] = {{0, "ip3", 1}, {1, "route", 1}};
  EXPECT_FALSE(h.limiter->AcquirePermit(c)->held());  // the route is full
  ASSERT_TRUE(p1->Release().ok());                    // frees ip1 and one route slot
  EXPECT_TRUE(h.limiter->AcquirePermit(c)->held());
  const Check d[] = {{0, "ip1", 1}};
  EXPECT_TRUE(h.limiter->AcquirePermit(d)->held());
  const Check rate_only[] = {{2, "ip1", 1}};
  EXPECT_EQ(h.limiter->AcquirePermit(rate_only).status().code(), ErrorCode::kInvalidArgument);
}

// A store whose every call fails.
class DownStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision>) override {
    (void)batch;
    return Status::Unavailable("down");
  }
  Status Reset(const Policy&, std::string_view) override { return Status::Unavailable("down"); }
  bool IsRemote() const override { return true; }
};

TEST(Permits, StoreFailureFollowsTheFailureMode) {
  auto make = [](FailureMode mode) {
    LimiterOptions o;
    Policy p = Policy::Concurrency("inflight", 1, kLease);
    p.failure_mode = mode;
    o.policies = {p};
    o.store = std::make_shared<DownStore>();
    o.clock = std::make_shared<ManualClock>(kNoon);
    return std::move(Limiter::Create(std::move(o))).value();
  };
  auto open = make(FailureMode::kFailOpen);
  auto a = open->AcquirePermit("k");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->held());
  EXPECT_EQ(a->decision().source, DecisionSource::kFailOpen);
  EXPECT_TRUE(a->Release().ok());  // held nowhere: a no-op
  auto closed = make(FailureMode::kFailClosed);
  EXPECT_FALSE(closed->AcquirePermit("k")->held());
  auto fallback = make(FailureMode::kLocalFallback);
  auto f1 = fallback->AcquirePermit("k");
  EXPECT_TRUE(f1->held());
  EXPECT_EQ(f1->decision().source, DecisionSource::kLocalFallback);
  EXPECT_FALSE(fallback->AcquirePermit("k")->held());  // the fallback holds one at most
  EXPECT_TRUE(f1->Release().ok());                     // released in the fallback store
  EXPECT_TRUE(fallback->AcquirePermit("k")->held());
  // By id, the store is asked: its error comes back as is.
  EXPECT_EQ(fallback->Release("k", std::string(32, 'a')).code(), ErrorCode::kUnavailable);
}

// A MemoryStore that can be taken down and brought back.
class FlakyStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (down) return Status::DeadlineExceeded("down (test)");
    return inner.Run(batch, out);
  }
  Status Reset(const Policy& p, std::string_view k) override { return inner.Reset(p, k); }
  bool IsRemote() const override { return true; }
  MemoryStore inner;
  bool down = false;
};

// Issue #20 item 2: a store failure during a release or an extend is returned as is
// under every failure mode (never a success, never NotFound), and the permit is still
// held once the store is back.
TEST(Permits, ReleaseAndExtendReturnTheStoreErrorUnderEveryFailureMode) {
  for (FailureMode mode :
       {FailureMode::kFailOpen, FailureMode::kFailClosed, FailureMode::kLocalFallback}) {
    auto store = std::make_shared<FlakyStore>();
    LimiterOptions o;
    Policy p = Policy::Concurrency("inflight", 1, kLease);
    p.failure_mode = mode;
    o.policies = {p};
    o.store = store;
    o.clock = std::make_shared<ManualClock>(kNoon);
    auto limiter = std::move(Limiter::Create(std::move(o))).value();
    auto permit = limiter->AcquirePermit("k");
    ASSERT_TRUE(permit.ok() && permit->held());
    const std::string id = permit->id();
    store->down = true;
    const int m = static_cast<int>(mode);
    EXPECT_EQ(permit->Extend().code(), ErrorCode::kDeadlineExceeded) << m;
    EXPECT_EQ(limiter->Extend("k", id).code(), ErrorCode::kDeadlineExceeded) << m;
    EXPECT_EQ(limiter->Release("k", id).code(), ErrorCode::kDeadlineExceeded) << m;
    store->down = false;
    EXPECT_TRUE(limiter->Extend("k", id).ok()) << m;
    EXPECT_FALSE(limiter->AcquirePermit("k")->held()) << m;  // still held: the limit is 1
    EXPECT_TRUE(limiter->Release("k", permit->Detach()).ok()) << m;
  }
}

}  // namespace
}  // namespace sluice::testing
