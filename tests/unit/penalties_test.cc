// Penalties and blocks (issue #12 item 3): Policy::block_for, Limiter::Penalize and
// Limiter::Reward on the in-process store with a ManualClock, the core penalty
// functions' bounds, and the deny cache honouring a block.
#include <gtest/gtest.h>

#include <chrono>

#include "core/algorithms.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

Policy WithBlock(Policy p, Micros block_for) {
  p.block_for = block_for;
  return p;
}

TEST(BlockFor, Validation) {
  Policy p = Policy::FixedWindow("api", 3, seconds(1));
  p.block_for = -1;
  Status s = ValidatePolicy(p);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("policy 'api': block_for must not be negative"), std::string::npos)
      << s.message();
  p.block_for = 367LL * 24 * 3600 * kSec;
  s = ValidatePolicy(p);
  EXPECT_NE(s.message().find("block_for must be at most 366 days"), std::string::npos)
      << s.message();
  p.block_for = 366LL * 24 * 3600 * kSec;
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p.block_for = 10 * kSec;
  p.lease = 2;
  s = ValidatePolicy(p);
  EXPECT_NE(s.message().find("block_for cannot be combined with lease"), std::string::npos)
      << s.message();
}

// The block starts at the first denial and lasts block_for from then; denials during it
// do not extend it; a refilled budget is still denied; retry_after is the time left.
TEST(BlockFor, StartsAtFirstDenialAndLastsBlockFor) {
  Harness h({WithBlock(Policy::FixedWindow("fw", 3, seconds(1)), 10 * kSec)});
  EXPECT_EQ(h.TakeN(3), 3);
  h.clock->Advance(250'000);
  Decision d = h.Take();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 10 * kSec);  // the block, not the window's 0.75 s
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_EQ(d.reset_after, 10 * kSec);
  h.clock->Advance(5 * kSec);  // the window has rolled over: budget is back
  d = h.Take();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 5 * kSec);  // not extended by this denial
  d = h.Take("k", 0);                  // a peek sees the block too
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 5 * kSec);
  h.clock->Advance(5 * kSec - 1);
  d = h.Take();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 1);
  h.clock->Advance(1);
  EXPECT_EQ(h.TakeN(3), 3);  // the block is over, the full budget is there
  d = h.Take();              // the next denial starts a new block
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 10 * kSec);
  // Other keys are not affected.
  EXPECT_TRUE(h.Take("other").allowed);
}

TEST(BlockFor, ResetEndsTheBlock) {
  Harness g({WithBlock(Policy::TokenBucket("tb", 2, 2, seconds(1)), 300 * kSec)});
  EXPECT_EQ(g.TakeN(3), 2);
  EXPECT_FALSE(g.Take().allowed);
  g.clock->Advance(60 * kSec);
  EXPECT_FALSE(g.Take().allowed);
  ASSERT_TRUE(g.limiter->Reset("k").ok());
  EXPECT_EQ(g.TakeN(2), 2);
}

// Peeks never start a block; neither does a batch denied by another policy.
TEST(BlockFor, OnlyItsOwnDenialStartsIt) {
  Harness h({WithBlock(Policy::FixedWindow("blocking", 10, seconds(1)), 60 * kSec),
             Policy::FixedWindow("tight", 1, seconds(1))});
  EXPECT_TRUE(h.Take().allowed);
  Decision per[2];
  auto d = h.limiter->Acquire("k", 1, per);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_TRUE(per[0].allowed);  // "blocking" allowed; "tight" denied the batch
  EXPECT_FALSE(per[1].allowed);
  h.clock->Advance(kSec);
  EXPECT_TRUE(h.Take().allowed);  // no block was started
}

// Issue #17 bug 3: a penalty on a policy whose on_change is not as_is adds to the usage
// its own decisions recorded (the in-process store marks such states as carry-over
// states); it does not start from a fresh state. Every algorithm with penalties.
TEST(Penalize, AddsToUsageUnderEveryOnChangeMode) {
  for (OnChange mode : {OnChange::kAsIs, OnChange::kReset, OnChange::kProportional}) {
    for (Policy p :
         {Policy::FixedWindow("p", 4, seconds(10)),
          Policy::SlidingWindowCounter("p", 4, seconds(10)),
          Policy::TokenBucket("p", 4, 4, seconds(10)), Policy::Gcra("p", 4, seconds(10), 4)}) {
      p.on_change = mode;
      const std::string what =
          std::string(AlgorithmName(p.algorithm)) + " " + std::string(OnChangeName(mode));
      Harness h({p});
      ASSERT_EQ(h.TakeN(2), 2) << what;
      auto d = h.limiter->Penalize("k", 1);
      ASSERT_TRUE(d.ok()) << what << ": " << d.status().ToString();
      EXPECT_EQ(d->remaining, 1u) << what << ": 2 taken + 1 penalty of 4";
      EXPECT_EQ(h.TakeN(3), 1) << what;
    }
  }
}

TEST(Penalize, FixedWindowGoesOverTheLimitUpToTwice) {
  Harness h({Policy::FixedWindow("fw", 3, seconds(1))});
  auto d = h.limiter->Penalize("k", 3);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->allowed);  // no room for a request of cost 1
  EXPECT_EQ(d->remaining, 0u);
  EXPECT_EQ(d->retry_after, kSec);
  d = h.limiter->Penalize("k", 3);  // count 6 = 2 x limit
  ASSERT_TRUE(d.ok());
  d = h.limiter->Penalize("k", 3);  // bounded: stays at 6
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(h.limiter->Reward("k", 3).ok());  // 3: still full
  EXPECT_FALSE(h.Take().allowed);
  ASSERT_TRUE(h.limiter->Reward("k", 1).ok());  // 2: one unit free
  EXPECT_TRUE(h.Take().allowed);
  EXPECT_FALSE(h.Take().allowed);
  h.clock->Advance(kSec);
  EXPECT_EQ(h.TakeN(4), 3);
}

TEST(Penalize, AllowedWhileBudgetIsLeft) {
  Harness h({Policy::FixedWindow("fw", 10, seconds(1))});
  auto d = h.limiter->Penalize("k", 4);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 6u);
  EXPECT_EQ(d->retry_after, 0);
  EXPECT_EQ(h.TakeN(10), 6);
}

TEST(Penalize, TokenBucketGoesNegativeDownToMinusCapacity) {
  // 10 tokens, 1 per second.
  Harness h({Policy::TokenBucket("tb", 10, 10, seconds(10))});
  auto d = h.limiter->Penalize("k", 10);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_NEAR(static_cast<double>(d->retry_after), 1e6, 1);
  d = h.limiter->Penalize("k", 10);  // -10 tokens
  EXPECT_NEAR(static_cast<double>(d->retry_after), 11e6, 1);
  d = h.limiter->Penalize("k", 10);  // bounded at -capacity
  EXPECT_NEAR(static_cast<double>(d->retry_after), 11e6, 1);
  EXPECT_NEAR(static_cast<double>(d->reset_after), 20e6, 1);
  ASSERT_TRUE(h.limiter->Reward("k", 5).ok());  // -5
  d = h.limiter->Peek("k");
  EXPECT_NEAR(static_cast<double>(d->retry_after), 6e6, 1);
  h.clock->Advance(6 * kSec);
  EXPECT_EQ(h.TakeN(2), 1);
}

TEST(Penalize, GcraMovesTheTatForwardUpToTwiceTau) {
  // 1 per second, burst 10: tau = 10 s.
  Harness h({Policy::Gcra("g", 10, seconds(10), 10)});
  auto d = h.limiter->Penalize("k", 10);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->retry_after, kSec);
  d = h.limiter->Penalize("k", 10);
  EXPECT_EQ(d->retry_after, 11 * kSec);
  d = h.limiter->Penalize("k", 10);  // bounded at now + 2 tau
  EXPECT_EQ(d->retry_after, 11 * kSec);
  EXPECT_EQ(d->reset_after, 20 * kSec);
  h.clock->Advance(11 * kSec);
  EXPECT_EQ(h.TakeN(2), 1);
}

TEST(Penalize, SlidingWindowLogAndCounter) {
  Harness h({Policy::SlidingWindowLog("log", 3, seconds(1)),
             Policy::SlidingWindowCounter("swc", 3, seconds(1))});
  Decision per[2];
  auto d = h.limiter->Penalize("k", 3, per);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(per[0].allowed);
  EXPECT_FALSE(per[1].allowed);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.limiter->Penalize("k", 3).ok());  // bounded at 6
  EXPECT_FALSE(h.Take().allowed);
  h.clock->Advance(kSec);
  // The log's entries have left the window; the counter's 6 still weigh on it.
  d = h.limiter->Acquire("k", 1, per);
  EXPECT_TRUE(per[0].allowed);
  EXPECT_FALSE(per[1].allowed);
  h.clock->Advance(kSec);
  EXPECT_EQ(h.TakeN(4), 3);
}

// A penalty that leaves the key over its limit starts the block; one on a blocked key
// does not extend it.
TEST(Penalize, StartsTheBlockWhenOverTheLimit) {
  Harness h({WithBlock(Policy::FixedWindow("login", 5, minutes(1)), 15 * 60 * kSec)});
  auto d = h.limiter->Penalize("user:1", 2);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);  // 3 attempts left
  EXPECT_EQ(d->remaining, 3u);
  d = h.limiter->Penalize("user:1", 3);
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->retry_after, 15 * 60 * kSec);
  h.clock->Advance(10 * 60 * kSec);
  d = h.limiter->Penalize("user:1", 1);
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(d->retry_after, 5 * 60 * kSec);  // not extended
  EXPECT_FALSE(h.Take("user:1").allowed);
  h.clock->Advance(5 * 60 * kSec);
  EXPECT_TRUE(h.Take("user:1").allowed);
}

TEST(Penalize, BadInput) {
  Harness h({Policy::FixedWindow("fw", 3, seconds(1))});
  auto d = h.limiter->Penalize("k", 0);
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("penalty cost 0 of policy 'fw' must be 1-3"),
            std::string::npos)
      << d.status().message();
  EXPECT_EQ(h.limiter->Penalize("k", 4).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Penalize("").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Reward("k", 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(h.limiter->Reward("k", 4).code(), ErrorCode::kInvalidArgument);
  Decision small[1];
  Harness two({Policy::FixedWindow("a", 3, seconds(1)), Policy::FixedWindow("b", 3, seconds(1))});
  EXPECT_EQ(two.limiter->Penalize("k", 1, small).status().code(), ErrorCode::kInvalidArgument);
  // A penalty batch with a check out of range is refused whole.
  const Policy& p = h.limiter->policies()[0];
  StoreCheck checks[2] = {{.policy = &p, .key = "x", .cost = 1},
                          {.policy = &p, .key = "y", .cost = 0}};
  Decision out[2];
  EXPECT_EQ(h.store->Run({.op = StoreOp::kPenalize, .checks = checks, .now = kNoon}, out).code(),
            ErrorCode::kInvalidArgument);
  // Nothing of the refused batch was applied: "x" peeks like a key never used.
  const StoreCheck peeks[2] = {{.policy = &p, .key = "x", .cost = 0},
                               {.policy = &p, .key = "never", .cost = 0}};
  Decision peeked[2];
  ASSERT_TRUE(h.store->Run({.checks = peeks, .now = kNoon}, peeked).ok());
  EXPECT_EQ(peeked[0].remaining, peeked[1].remaining);
}

// Shadow policies take the penalty but report allowed (shadow_denied).
TEST(Penalize, ShadowReportsAllowed) {
  Harness h({Policy::FixedWindow("fw", 3, seconds(1))}, /*shadow=*/true);
  auto d = h.limiter->Penalize("k", 3);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_TRUE(d->shadow_denied);
}

// A blocked key cannot reserve: the reservation is denied with no wait, nothing taken,
// retry_after the time left of the block. A reservation beyond max_wait is a denial and
// starts the block like any other.
TEST(BlockFor, BlocksReservations) {
  Harness h({WithBlock(Policy::TokenBucket("tb", 2, 1, seconds(1)), 60 * kSec)});
  auto r = h.limiter->Reserve("k", 2, kSec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->allowed());
  EXPECT_EQ(r->wait(), 0);
  r = h.limiter->Reserve("k", 1, kSec / 2);  // needs 1 s, more than max_wait: denied
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->allowed());
  EXPECT_EQ(r->decision().retry_after, 60 * kSec);  // and the block started
  h.clock->Advance(10 * kSec);                      // the bucket is full again ...
  r = h.limiter->Reserve("k", 1, kSec);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->allowed());  // ... but the key is blocked
  EXPECT_EQ(r->wait(), 0);
  EXPECT_FALSE(r->held());
  EXPECT_EQ(r->decision().retry_after, 50 * kSec);
  h.clock->Advance(50 * kSec);
  EXPECT_EQ(h.TakeN(3), 2);
}

// The pure functions: a penalty is bounded at twice the capacity whatever its size.
TEST(CorePenalties, Bounds) {
  const Policy fw = Policy::FixedWindow("f", 4, seconds(1));
  core::FixedWindowState f{kNoon, 7};
  Micros e;
  core::FixedWindowPenalize(fw, f, false, kNoon, 4, &f, &e);
  EXPECT_EQ(f.count, 8u);
  EXPECT_EQ(e, kNoon + kSec);
  const Policy tb = Policy::TokenBucket("t", 4, 4, seconds(1));
  core::TokenBucketState b{-3.5, kNoon};
  core::TokenBucketPenalize(tb, b, false, kNoon, 4, &b, &e);
  EXPECT_EQ(b.tokens, -4.0);
  const Policy g = Policy::Gcra("g", 4, seconds(4), 4);  // T = 1 s, tau = 4 s
  core::GcraState s{static_cast<double>(kNoon + 7 * kSec)};
  core::GcraPenalize(g, s, false, kNoon, 4, &s, &e);
  EXPECT_EQ(s.tat, static_cast<double>(kNoon + 8 * kSec));
  EXPECT_EQ(e, kNoon + 8 * kSec);
  // A fresh state starts as a new one: a full bucket minus the cost.
  core::TokenBucketPenalize(tb, {}, true, kNoon, 3, &b, &e);
  EXPECT_EQ(b.tokens, 1.0);
  Decision d;
  d.allowed = true;
  d.remaining = 3;
  d.retry_after = 0;
  d.reset_after = 5;
  core::ApplyBlock(&d, 10);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_EQ(d.retry_after, 10);
  EXPECT_EQ(d.reset_after, 10);
}

// A remote-looking store that counts calls, over a MemoryStore.
class CountingStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    ++calls;
    return inner.Run(batch, out);
  }
  Status Refund(std::span<const StoreCheck> c, Micros now) {
    ++calls;
    return inner.Run({.op = StoreOp::kRefund, .checks = c, .now = now}, {});
  }
  Status Reset(const Policy& p, std::string_view k) override { return inner.Reset(p, k); }
  bool IsRemote() const override { return true; }
  MemoryStore inner;
  int calls = 0;
};

// The deny cache keeps a blocked key until the block ends: no store call during it,
// one at its end. A penalty's denial is cached too; Reset forgets it.
TEST(BlockFor, DenyCacheHonoursTheBlock) {
  auto store = std::make_shared<CountingStore>();
  auto clock = std::make_shared<ManualClock>(kNoon);
  LimiterOptions o;
  o.policies = {WithBlock(Policy::FixedWindow("fw", 2, seconds(1)), 30 * kSec)};
  o.store = store;
  o.clock = clock;
  auto l = std::move(Limiter::Create(std::move(o))).value();
  EXPECT_TRUE(l->Acquire("k")->allowed);
  EXPECT_TRUE(l->Acquire("k")->allowed);
  EXPECT_FALSE(l->Acquire("k")->allowed);  // starts the block
  EXPECT_EQ(store->calls, 3);
  for (int i = 0; i < 29; ++i) {
    clock->Advance(kSec);
    auto d = l->Acquire("k");
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->source, DecisionSource::kDenyCache);
    EXPECT_EQ(d->retry_after, (29 - i) * kSec);
  }
  EXPECT_EQ(store->calls, 3);
  clock->Advance(kSec);
  EXPECT_TRUE(l->Acquire("k")->allowed);  // the block is over: asked the store
  EXPECT_EQ(store->calls, 4);

  auto d = l->Penalize("p", 2);  // over the limit: blocked, and cached
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(store->calls, 5);
  EXPECT_EQ(l->Acquire("p")->source, DecisionSource::kDenyCache);
  EXPECT_EQ(store->calls, 5);
  ASSERT_TRUE(l->Reset("p").ok());
  EXPECT_TRUE(l->Acquire("p")->allowed);
  EXPECT_EQ(store->calls, 6);
}

// A penalty reads a state written under other parameters as a decision does: after a
// limit change under on_change proportional, the carried usage stays and the penalty
// adds to it. (It was read as fresh: a penalty of 1 then left 19 of 20 where a peek
// had just said 10.) Every word algorithm, on one store, through two limiters.
TEST(Penalize, AfterAProportionalLimitChangeAddsToTheCarriedUsage) {
  const Policy before[] = {Policy::FixedWindow("api", 10, minutes(1)),
                           Policy::SlidingWindowCounter("api", 10, minutes(1)),
                           Policy::TokenBucket("api", 10, 10, minutes(1)),
                           Policy::Gcra("api", 10, minutes(1), 10)};
  for (Policy p : before) {
    auto clock = std::make_shared<ManualClock>(kNoon);
    auto store = std::make_shared<MemoryStore>();
    auto make = [&](const Policy& q) {
      LimiterOptions o;
      o.policies = {q};
      o.store = store;
      o.clock = clock;
      o.deny_cache = false;
      return std::move(Limiter::Create(std::move(o))).value();
    };
    p.on_change = OnChange::kProportional;
    auto first = make(p);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(first->Acquire("k")->allowed) << i;
    Policy bigger = p;
    bigger.limit = 20;
    if (bigger.burst != 0) bigger.burst = 20;
    auto second = make(bigger);
    const auto peek = second->Peek("k");
    ASSERT_TRUE(peek.ok());
    EXPECT_EQ(peek->remaining, 10u) << AlgorithmName(p.algorithm) << ": 5 of 10 is 10 of 20";
    const auto d = second->Penalize("k", 1);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->remaining, 9u) << AlgorithmName(p.algorithm);
    EXPECT_EQ(second->Peek("k")->remaining, 9u) << AlgorithmName(p.algorithm);
  }
}

}  // namespace
}  // namespace sluice::testing
