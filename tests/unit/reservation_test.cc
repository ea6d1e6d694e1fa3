// Reservations (issue #12 item 2): Limiter::Reserve / AcquireWaiting, the core
// algorithms with max_wait, MemoryStore, the deny cache and the simulated sleeper.
// All time is simulated (ManualClock + ManualSleeper); no test sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "core/algorithms.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

constexpr Micros kMs = 1000;

// A harness whose limiter sleeps on a ManualSleeper over its clock.
struct WaitHarness {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(kNoon);
  std::shared_ptr<ManualSleeper> sleeper;
  std::shared_ptr<Store> store;
  std::unique_ptr<Limiter> limiter;

  explicit WaitHarness(std::vector<Policy> policies, bool auto_advance = true,
                       std::shared_ptr<Store> s = nullptr) {
    sleeper = std::make_shared<ManualSleeper>(clock, auto_advance);
    store = s ? std::move(s) : std::make_shared<MemoryStore>();
    LimiterOptions o;
    o.policies = std::move(policies);
    o.store = store;
    o.clock = clock;
    o.sleeper = sleeper;
    auto r = Limiter::Create(std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    limiter = std::move(r).value();
  }

  Reservation Reserve(Micros max_wait, std::uint64_t cost = 1, std::string_view key = "k") {
    auto r = limiter->Reserve(key, cost, max_wait);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : Reservation{};
  }
};

// 10 per second, burst 1 for both: one unit every 100 ms.
Policy Bucket() {
  return Policy::TokenBucket("bucket", 1, 10, std::chrono::seconds(1));
}
Policy Gcra1() {
  return Policy::Gcra("gcra", 10, std::chrono::seconds(1), 1);
}

class BucketAndGcra : public ::testing::TestWithParam<Algorithm> {
 protected:
  Policy Make() const { return GetParam() == Algorithm::kTokenBucket ? Bucket() : Gcra1(); }
};

// The first request passes at once; each next one is given the next 100 ms slot, up to
// max_wait; beyond it the request is denied and nothing is taken.
TEST_P(BucketAndGcra, ReservationsTakeSuccessiveSlotsUpToMaxWait) {
  WaitHarness h({Make()});
  Reservation first = h.Reserve(1'000 * kMs);
  ASSERT_TRUE(first.allowed());
  EXPECT_EQ(first.wait(), 0);
  for (int i = 1; i <= 10; ++i) {
    Reservation r = h.Reserve(1'000 * kMs);
    ASSERT_TRUE(r.allowed()) << i;
    EXPECT_EQ(r.wait(), i * 100 * kMs) << i;
    EXPECT_EQ(r.decision().retry_after, 0);
    EXPECT_EQ(r.decision().remaining, 0u);
    EXPECT_TRUE(r.held());
  }
  Reservation denied = h.Reserve(1'000 * kMs);
  EXPECT_FALSE(denied.allowed());
  EXPECT_FALSE(denied.held());
  EXPECT_EQ(denied.wait(), 0);
  EXPECT_EQ(denied.decision().retry_after, 1'100 * kMs);  // as for a plain request
  // Nothing was taken by the denial: the same answer again.
  EXPECT_EQ(h.Reserve(1'000 * kMs).decision().retry_after, 1'100 * kMs);
  // A plain request waits behind the reservations.
  auto plain = h.limiter->Acquire("k");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->allowed);
  EXPECT_EQ(plain->retry_after, 1'100 * kMs);
  EXPECT_EQ(plain->wait, 0);
  // Once the slots have passed, requests pass at once again.
  h.clock->Advance(1'100 * kMs);
  Reservation later = h.Reserve(1'000 * kMs);
  EXPECT_TRUE(later.allowed());
  EXPECT_EQ(later.wait(), 0);
}

// max_wait 0 is a plain decision.
TEST_P(BucketAndGcra, MaxWaitZeroIsAPlainDecision) {
  WaitHarness h({Make()});
  EXPECT_TRUE(h.Reserve(0).allowed());
  Reservation r = h.Reserve(0);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.decision().retry_after, 100 * kMs);
}

// A cancelled reservation gives its budget back: the next reservation gets its slot.
TEST_P(BucketAndGcra, CancelGivesTheBudgetBack) {
  WaitHarness h({Make()});
  ASSERT_TRUE(h.Reserve(1'000 * kMs).allowed());
  Reservation a = h.Reserve(1'000 * kMs);
  Reservation b = h.Reserve(1'000 * kMs);
  ASSERT_EQ(b.wait(), 200 * kMs);
  ASSERT_TRUE(b.Cancel().ok());
  EXPECT_FALSE(b.held());
  EXPECT_TRUE(b.Cancel().ok());  // nothing held: nothing done
  EXPECT_EQ(h.Reserve(1'000 * kMs).wait(), 200 * kMs);
  // Cancelling every held reservation brings the key back to where it was.
  ASSERT_TRUE(a.Cancel().ok());
}

// The admitted times (reservation time + wait) of a random stream of reservations at
// 5x the rate never exceed the algorithm's bound: in any window of length W, at most
// limit + burst units (the bucket refills `limit` per W on top of its burst).
TEST_P(BucketAndGcra, AdmittedTimesStayWithinTheBoundInEveryWindow) {
  Policy p = GetParam() == Algorithm::kTokenBucket
                 ? Policy::TokenBucket("b", 5, 20, std::chrono::seconds(1))
                 : Policy::Gcra("g", 20, std::chrono::seconds(1), 5);
  WaitHarness h({p});
  std::mt19937_64 rng(7);
  std::vector<Micros> admitted;
  int denied = 0;
  for (int i = 0; i < 2000; ++i) {
    h.clock->Advance(static_cast<Micros>(rng() % 20'000));  // ~100/s: 5x the rate
    const Micros max_wait = static_cast<Micros>(rng() % (p.window + 1));
    Reservation r = h.Reserve(max_wait);
    if (!r.allowed()) {
      ++denied;
      continue;
    }
    EXPECT_LE(r.wait(), max_wait);
    admitted.push_back(h.clock->Now() + r.wait());
  }
  std::sort(admitted.begin(), admitted.end());
  const std::size_t bound = p.limit + p.Capacity();
  std::size_t worst = 0;
  for (std::size_t i = 0, j = 0; i < admitted.size(); ++i) {
    while (admitted[i] - admitted[j] >= p.window) ++j;
    worst = std::max(worst, i - j + 1);
  }
  EXPECT_LE(worst, bound);
  EXPECT_GT(denied, 0);
  EXPECT_GE(worst, p.limit);  // the load really filled windows
}

INSTANTIATE_TEST_SUITE_P(Reservations, BucketAndGcra,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kGcra),
                         [](const auto& i) { return std::string(AlgorithmName(i.param)); });

// The pure algorithms: a reservation is allowed iff the plain retry_after fits in
// max_wait, and then reports it as its wait.
TEST(ReservationCore, WaitIsThePlainRetryAfterWhenItFits) {
  const Policy b = Policy::TokenBucket("b", 4, 2, std::chrono::seconds(1));  // 1 per 500 ms
  core::TokenBucketState bs{}, next{};
  Micros expires = 0;
  Decision d = core::TokenBucket(b, bs, true, kNoon, 4, &next, &expires);
  ASSERT_TRUE(d.allowed);
  bs = next;
  const Decision plain = core::TokenBucket(b, bs, false, kNoon, 3, &next, &expires);
  ASSERT_FALSE(plain.allowed);
  EXPECT_EQ(plain.retry_after, 1'500 * kMs);
  const Decision tight = core::TokenBucket(b, bs, false, kNoon, 3, &next, &expires, 1'499 * kMs);
  EXPECT_FALSE(tight.allowed);
  EXPECT_EQ(tight.retry_after, 1'500 * kMs);
  const Decision fits = core::TokenBucket(b, bs, false, kNoon, 3, &next, &expires, 1'500 * kMs);
  EXPECT_TRUE(fits.allowed);
  EXPECT_EQ(fits.wait, 1'500 * kMs);
  EXPECT_DOUBLE_EQ(next.tokens, -3.0);
  EXPECT_EQ(fits.reset_after, 3'500 * kMs);  // from -3 to 4 tokens at 2/s
  // A peek never reserves.
  const Decision peek = core::TokenBucket(b, bs, false, kNoon, 0, &next, &expires, 1'500 * kMs);
  EXPECT_FALSE(peek.allowed);
  EXPECT_EQ(peek.wait, 0);

  const Policy g = Policy::Gcra("g", 2, std::chrono::seconds(1), 4);
  core::GcraState gs{}, gn{};
  d = core::Gcra(g, gs, true, kNoon, 4, &gn, &expires);
  ASSERT_TRUE(d.allowed);
  gs = gn;
  EXPECT_FALSE(core::Gcra(g, gs, false, kNoon, 3, &gn, &expires, 1'499 * kMs).allowed);
  const Decision gfits = core::Gcra(g, gs, false, kNoon, 3, &gn, &expires, 1'500 * kMs);
  EXPECT_TRUE(gfits.allowed);
  EXPECT_EQ(gfits.wait, 1'500 * kMs);
  EXPECT_EQ(gfits.reset_after, 3'500 * kMs);
}

// The window algorithms never take future budget: a reservation is a plain decision.
TEST(ReservationWindows, ReserveIsAPlainDecision) {
  for (const Policy& p : {Policy::FixedWindow("f", 2, std::chrono::seconds(1)),
                          Policy::SlidingWindowCounter("c", 2, std::chrono::seconds(1)),
                          Policy::SlidingWindowLog("l", 2, std::chrono::seconds(1))}) {
    SCOPED_TRACE(p.name);
    WaitHarness h({p});
    EXPECT_TRUE(h.Reserve(1'000 * kMs).allowed());
    EXPECT_TRUE(h.Reserve(1'000 * kMs).allowed());
    Reservation r = h.Reserve(1'000 * kMs);
    EXPECT_FALSE(r.allowed());
    EXPECT_EQ(r.wait(), 0);
    EXPECT_GT(r.decision().retry_after, 0);
  }
}

// AcquireWaiting on a window algorithm waits for the window's room and tries again.
TEST(AcquireWaiting, WindowAlgorithmWaitsForTheNextWindow) {
  WaitHarness h({Policy::FixedWindow("f", 2, std::chrono::seconds(1))});
  h.clock->Advance(600 * kMs);
  EXPECT_TRUE(h.limiter->Acquire("k")->allowed);
  EXPECT_TRUE(h.limiter->Acquire("k")->allowed);
  // 400 ms until the next window: 399 ms of patience is not enough (nothing slept).
  auto no = h.limiter->AcquireWaiting("k", 1, 399 * kMs);
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->allowed);
  EXPECT_EQ(no->retry_after, 400 * kMs);
  EXPECT_TRUE(h.sleeper->slept().empty());
  auto yes = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs);
  ASSERT_TRUE(yes.ok()) << yes.status().ToString();
  EXPECT_TRUE(yes->allowed);
  EXPECT_EQ(yes->wait, 400 * kMs);
  EXPECT_EQ(h.clock->Now(), kNoon + 1'000 * kMs);
  EXPECT_EQ(h.sleeper->slept(), std::vector<Micros>{400 * kMs});
}

// AcquireWaiting on a bucket sleeps exactly the reservation's wait, in simulated time.
TEST(AcquireWaiting, SleepsTheReservationsWaitInSimulatedTime) {
  WaitHarness h({Gcra1()});
  EXPECT_TRUE(h.limiter->Acquire("k")->allowed);
  auto d = h.limiter->AcquireWaiting("k", 1, 500 * kMs);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->wait, 100 * kMs);
  EXPECT_EQ(h.clock->Now(), kNoon + 100 * kMs);
  EXPECT_EQ(h.sleeper->slept(), std::vector<Micros>{100 * kMs});
  // Going ahead at its slot: the next request's slot is 100 ms later.
  auto next = h.limiter->Reserve("k", 1, 500 * kMs);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->wait(), 100 * kMs);
}

// A cancelled wait returns kCancelled and gives the reservation back; waiters in one
// process are served in arrival order.
TEST(AcquireWaiting, CancellationRefundsAndOrderIsArrivalOrder) {
  WaitHarness h({Gcra1()}, /*auto_advance=*/false);
  EXPECT_TRUE(h.limiter->Acquire("k")->allowed);
  CancellationToken first_token, second_token;
  Result<Decision> first = Status::Internal("not run"), second = Status::Internal("not run");
  std::thread t1([&] { first = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs, &first_token); });
  ASSERT_TRUE(h.sleeper->AwaitSleepers(1, std::chrono::seconds(30)));
  std::thread t2([&] { second = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs, &second_token); });
  ASSERT_TRUE(h.sleeper->AwaitSleepers(2, std::chrono::seconds(30)));
  // Arrival order: the first waiter has the 100 ms slot, the second the 200 ms one.
  EXPECT_EQ(h.sleeper->slept(), (std::vector<Micros>{100 * kMs, 200 * kMs}));
  second_token.Cancel();
  t2.join();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), ErrorCode::kCancelled);
  // The cancelled slot came back: a new reservation gets 200 ms again.
  auto again = h.limiter->Reserve("k", 1, 1'000 * kMs);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->wait(), 200 * kMs);
  ASSERT_TRUE(again->Cancel().ok());
  h.sleeper->Advance(100 * kMs);
  t1.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->allowed);
  EXPECT_EQ(first->wait, 100 * kMs);
  // A token cancelled before the call: nothing is taken, kCancelled.
  CancellationToken done;
  done.Cancel();
  auto pre = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs, &done);
  EXPECT_EQ(pre.status().code(), ErrorCode::kCancelled);
  auto after = h.limiter->Reserve("k", 1, 1'000 * kMs);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->wait(), 100 * kMs);
}

TEST(Reservation, BadInputIsRejectedWithAClearError) {
  WaitHarness h({Gcra1(), Policy::FixedWindow("minute", 100, std::chrono::minutes(1))});
  auto above = h.limiter->Reserve("k", 1, 1'000 * kMs + 1);
  ASSERT_FALSE(above.ok());
  EXPECT_EQ(above.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(above.status().message().find("max_wait 1000001us exceeds the window 1000000us"),
            std::string::npos)
      << above.status().message();
  EXPECT_NE(above.status().message().find("'gcra'"), std::string::npos);
  auto negative = h.limiter->Reserve("k", 1, -1);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("max_wait must be >= 0"), std::string::npos);
  auto cost = h.limiter->AcquireWaiting("k", 2, 1'000 * kMs);
  ASSERT_FALSE(cost.ok());
  EXPECT_EQ(cost.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(cost.status().message().find("exceeds the capacity 1"), std::string::npos);
  auto waiting = h.limiter->AcquireWaiting("k", 1, 2'000 * kMs);
  EXPECT_EQ(waiting.status().code(), ErrorCode::kInvalidArgument);
}

// Several policies: all must fit within max_wait (all or nothing); the wait is the
// longest; a denial takes nothing from any of them.
TEST(Reservation, MultiPolicyIsAllOrNothingWithTheLongestWait) {
  WaitHarness h({Policy::TokenBucket("fast", 1, 10, std::chrono::seconds(1)),
                 Policy::Gcra("slow", 4, std::chrono::seconds(1), 1)});
  ASSERT_TRUE(h.Reserve(1'000 * kMs).allowed());
  Decision per[2];
  auto r = h.limiter->Reserve("k", 1, 1'000 * kMs, per);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->allowed());
  EXPECT_EQ(per[0].wait, 100 * kMs);
  EXPECT_EQ(per[1].wait, 250 * kMs);
  EXPECT_EQ(r->wait(), 250 * kMs);
  EXPECT_EQ(r->decision().policy_index, 1);
  // "slow" has its next slot at 500 ms: beyond 300 ms, so "fast" is not charged either.
  auto no = h.limiter->Reserve("k", 1, 300 * kMs, per);
  ASSERT_TRUE(no.ok());
  EXPECT_FALSE(no->allowed());
  EXPECT_TRUE(per[0].allowed);
  EXPECT_EQ(per[0].wait, 0);  // not taken
  auto fast = h.limiter->FindPolicy("fast");
  ASSERT_TRUE(fast.ok());
  Check c{*fast, "k", 1};
  auto f = h.limiter->Reserve(std::span<const Check>(&c, 1), 1'000 * kMs);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wait(), 200 * kMs);  // the slot after the first reservation's
}

// Wraps a MemoryStore, pretends to be remote (deny cache on) and counts calls.
class RemoteMemory final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    ++calls;
    return inner.Run(batch, out);
  }
  Status Refund(std::span<const StoreCheck> c, Micros now) {
    return inner.Run({.op = StoreOp::kRefund, .checks = c, .now = now}, {});
  }
  Status Reset(const Policy& p, std::string_view k) override { return inner.Reset(p, k); }
  bool IsRemote() const override { return true; }
  MemoryStore inner;
  int calls = 0;
};

// A key denied for plain requests (and so in the deny cache) is still asked about for
// a reservation that could be granted within its max_wait; a reservation whose
// max_wait is too short is denied from the cache.
TEST(Reservation, DenyCacheDoesNotDenyAReservationThatFits) {
  auto remote = std::make_shared<RemoteMemory>();
  WaitHarness h({Gcra1()}, true, remote);
  EXPECT_TRUE(h.limiter->Acquire("k")->allowed);
  auto denied = h.limiter->Acquire("k");
  ASSERT_FALSE(denied->allowed);  // cached until +100 ms
  const int calls = remote->calls;
  auto cached = h.limiter->Reserve("k", 1, 50 * kMs);
  ASSERT_TRUE(cached.ok());
  EXPECT_FALSE(cached->allowed());
  EXPECT_EQ(cached->decision().source, DecisionSource::kDenyCache);
  EXPECT_EQ(remote->calls, calls);
  auto fits = h.limiter->Reserve("k", 1, 200 * kMs);
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(fits->allowed());
  EXPECT_EQ(fits->wait(), 100 * kMs);
  EXPECT_EQ(remote->calls, calls + 1);
}

// Window algorithms: waiters of one process that wake at the same moment (the window
// opening) try in arrival order, whatever order their threads run in.
TEST(AcquireWaiting, WindowWaitersOfOneProcessAreServedInArrivalOrder) {
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    WaitHarness h({Policy::FixedWindow("f", 1, std::chrono::seconds(1))}, /*auto_advance=*/false);
    h.clock->Advance(500 * kMs);
    ASSERT_TRUE(h.limiter->Acquire("k")->allowed);  // the window is full until +1 s
    Result<Decision> first = Status::Internal("not run"), second = Status::Internal("not run");
    std::thread t1([&] { first = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs); });
    ASSERT_TRUE(h.sleeper->AwaitSleepers(1, std::chrono::seconds(30)));
    std::thread t2([&] { second = h.limiter->AcquireWaiting("k", 1, 1'000 * kMs); });
    ASSERT_TRUE(h.sleeper->AwaitSleepers(2, std::chrono::seconds(30)));
    h.sleeper->Advance(500 * kMs);  // both wake at the window's start; one unit in it
    t1.join();
    t2.join();
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_TRUE(first->allowed) << "the first to arrive is served first";
    EXPECT_EQ(first->wait, 500 * kMs);
    EXPECT_FALSE(second->allowed) << "the next window is beyond the second's max_wait";
  }
}

// The sleepers themselves.
TEST(Sleepers, ManualSleeperWakesOnAdvanceOrCancel) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  ManualSleeper s(clock);
  EXPECT_TRUE(s.SleepFor(0, nullptr));
  bool woke = false;
  std::thread t([&] { woke = s.SleepFor(10, nullptr); });
  ASSERT_TRUE(s.AwaitSleepers(1, std::chrono::seconds(30)));
  s.Advance(9);
  EXPECT_EQ(s.sleepers(), 1u);
  s.Advance(1);
  t.join();
  EXPECT_TRUE(woke);
  CancellationToken token;
  std::thread c([&] { woke = s.SleepFor(10, &token); });
  ASSERT_TRUE(s.AwaitSleepers(1, std::chrono::seconds(30)));
  token.Cancel();
  c.join();
  EXPECT_FALSE(woke);
  EXPECT_FALSE(s.SleepFor(5, &token));  // already cancelled
  SystemSleeper real;
  EXPECT_FALSE(real.SleepFor(60'000'000, &token));  // returns at once: cancelled
}

TEST(Sleepers, SystemSleeperIsWokenByCancel) {
  SystemSleeper real;
  CancellationToken token;
  bool result = true;
  std::thread t([&] { result = real.SleepFor(600'000'000, &token); });
  token.Cancel();  // before or during the wait: it ends either way
  t.join();
  EXPECT_FALSE(result);
}

}  // namespace
}  // namespace sluice::testing
