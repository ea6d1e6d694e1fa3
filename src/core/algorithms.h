// Internal: the pure algorithms. Each is (policy, state, now, cost) -> (decision, new
// state), with no I/O and no clock reads. The Redis Lua scripts mirror these functions
// operation for operation (docs/algorithms.md is the shared specification), so that the
// same request sequence gives the same decisions in both stores.
//
// Conventions shared by all algorithms:
//  - cost 0 is a peek: nothing is consumed; allowed/retry_after answer for cost 1;
//  - `now` is first raised to the latest time the state has seen, so time going
//    backwards mints nothing;
//  - a denied request leaves the state as it was (only re-normalised);
//  - `expires` is when the state will be back to "full": dropping it then changes no
//    decision.
//
// Refunds (Store::Refund) give a cost back to an existing state: each *Refund
// function takes a state the store holds (not fresh: a key with no state, or one back
// to full, has nothing to give back, and the store leaves it alone) and returns the
// new state and its `expires`. Refunds never mint more than the state could hold: a
// window count never goes below 0, tokens never above the capacity, a TAT never
// below now.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/permit_set.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/policy.h"

namespace sluice::core {

// Slack for floating-point comparisons, in units of cost (tokens/requests). Bucket,
// GCRA and sliding counter arithmetic is IEEE double, identical in C++ and Lua.
inline constexpr double kEpsilon = 1e-9;

// ceil(x) microseconds, capped at 2^62: the wait for a cost beyond the capacity (an
// overage check asks up to 2^32 units, which never pass whole) can be 10^23 us at a
// slow rate, out of any clock's range. Every wait within a policy's bounds is far below.
inline Micros CeilMicros(double x) {
  constexpr double kCap = 4611686018427387904.0;
  return x >= kCap ? static_cast<Micros>(kCap) : static_cast<Micros>(std::ceil(x));
}

// Floor division that rounds towards negative infinity (times may be < 0 in tests).
inline Micros FloorTo(Micros t, Micros unit) {
  Micros r = t % unit;
  if (r < 0) r += unit;
  return t - r;
}

struct FixedWindowState {
  Micros window_start = 0;
  std::uint64_t count = 0;
};
// `fresh` is true when the key has no state yet (`in` is then ignored).
Decision FixedWindow(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                     std::uint64_t cost, FixedWindowState* out, Micros* expires);
// The current window's count goes down by `cost` (not below 0). A state of an earlier
// window (the window rolled over) is left unchanged.
void FixedWindowRefund(const Policy& p, const FixedWindowState& in, Micros now, std::uint64_t cost,
                       FixedWindowState* out, Micros* expires);

struct SlidingCounterState {
  Micros window_start = 0;
  std::uint64_t curr = 0;
  std::uint64_t prev = 0;
};
Decision SlidingWindowCounter(const Policy& p, const SlidingCounterState& in, bool fresh,
                              Micros now, std::uint64_t cost, SlidingCounterState* out,
                              Micros* expires);
// The current window's count goes down by `cost` (not below 0). Once the window has
// rolled over (the count is now the weighted previous one), nothing changes.
void SlidingWindowCounterRefund(const Policy& p, const SlidingCounterState& in, Micros now,
                                std::uint64_t cost, SlidingCounterState* out, Micros* expires);

struct TokenBucketState {
  double tokens = 0;
  Micros last = 0;
};
// `fresh` or a state that is new again (TokenBucketIsNew) starts at initial_tokens.
// Reservations (`max_wait` > 0, cost > 0): a request a plain decision would deny with
// retry_after <= max_wait is allowed with Decision::wait = that retry_after, and its
// cost is taken at once (tokens go negative, down to about -rate * max_wait).
Decision TokenBucket(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                     std::uint64_t cost, TokenBucketState* out, Micros* expires,
                     Micros max_wait = 0);
// True when initial_tokens is below the capacity: then a request (cost > 0) on a new
// bucket starts it even when it is not committed (denied, or another check of its
// batch denied), with the state TokenBucketStart gives. Stores write that state.
bool TokenBucketStartsOnDenial(const Policy& p);
// True when a stored state is "new" again at `now` (token_bucket.cc): at its expiry.
bool TokenBucketIsNew(const Policy& p, const TokenBucketState& in, Micros now);
// The state of a bucket started at `now` (initial_tokens, or full) and its expiry.
void TokenBucketStart(const Policy& p, Micros now, TokenBucketState* out, Micros* expires);
// Refills to max(now, last) as a decision does, then adds `cost` tokens, capped at the
// capacity.
void TokenBucketRefund(const Policy& p, const TokenBucketState& in, Micros now, std::uint64_t cost,
                       TokenBucketState* out, Micros* expires);

struct GcraState {
  double tat = 0;  // theoretical arrival time, microseconds
};
// Reservations (`max_wait` > 0, cost > 0): as TokenBucket's; the TAT then moves
// beyond now + tau, by up to max_wait.
Decision Gcra(const Policy& p, const GcraState& in, bool fresh, Micros now, std::uint64_t cost,
              GcraState* out, Micros* expires, Micros max_wait = 0);
// Moves the TAT back by `cost` emission intervals, never below `now`.
void GcraRefund(const Policy& p, const GcraState& in, Micros now, std::uint64_t cost,
                GcraState* out, Micros* expires);

// The sliding window log keeps one entry per accepted request. The container is
// abstract so the in-process store can use a ring buffer without allocating per call.
struct LogEntry {
  Micros ts;
  std::uint64_t cost;
};

// A FIFO of entries in timestamp order plus the latest time seen.
class SlidingLog {
 public:
  virtual ~SlidingLog() = default;
  virtual Micros last_seen() const = 0;
  virtual void set_last_seen(Micros t) = 0;
  virtual std::size_t size() const = 0;
  virtual const LogEntry& at(std::size_t i) const = 0;  // 0 = oldest
  virtual void pop_front() = 0;
  virtual void pop_back() = 0;
  // Appends; the store may grow its buffer (amortised, at most log2(limit) times).
  virtual void push_back(LogEntry e) = 0;
  virtual std::uint64_t used() const = 0;  // sum of costs of the entries
};

// Drops expired entries (they can never count again, since time is raised to
// last_seen), then decides. Appends the request when allowed and `commit` is true.
// When `commit` is false the caller may call SlidingWindowLogCommit later.
Decision SlidingWindowLog(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                          bool commit, Micros* expires);
void SlidingWindowLogCommit(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                            Micros* expires);
// Drops expired entries as a decision does, then removes up to `cost` units from the
// newest entries (the newest one left may keep part of its cost).
void SlidingWindowLogRefund(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                            Micros* expires);

// Penalties and blocks (Limiter::Penalize, Policy::block_for; core/penalties.cc).
//
// A penalty consumes `cost` units whatever the decision, up to a bound: a key's usage
// is never taken beyond twice its capacity (window counts at most 2 x limit, token
// bucket tokens at least -capacity, a GCRA TAT at most now + 2 x tau, a sliding log's
// units at most 2 x limit), so a penalised key is back to full within about two windows
// (refill periods) at most. Each returns the decision of a peek (cost 0: whether a
// request of cost 1 could pass) at the state after the penalty, and that state's
// expiry. The state is normalised first as a decision would (window roll, refill,
// time raised), and a fresh state is a new one.
Decision FixedWindowPenalize(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                             std::uint64_t cost, FixedWindowState* out, Micros* expires);
Decision SlidingWindowCounterPenalize(const Policy& p, const SlidingCounterState& in, bool fresh,
                                      Micros now, std::uint64_t cost, SlidingCounterState* out,
                                      Micros* expires);
Decision TokenBucketPenalize(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                             std::uint64_t cost, TokenBucketState* out, Micros* expires);
Decision GcraPenalize(const Policy& p, const GcraState& in, bool fresh, Micros now,
                      std::uint64_t cost, GcraState* out, Micros* expires);
// The log may grow to 2 x limit units (a store sizes its buffer for that).
Decision SlidingWindowLogPenalize(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                                  Micros* expires);

// --- overage (Policy::overage; issue #21 item 3) ---
// A penalty is a charge bounded at PenaltyBound; an overage charge (a denied check of
// a policy whose overage is kCharge or kDrain) one bounded at OverageBound. A charge of
// `cost` takes min(cost, bound - usage) units (none when the usage is at the bound
// already), where the usage is what a decision sees: a window's count (the sliding
// counter's estimate under overage, its current count for a penalty), capacity -
// tokens, (TAT - now) / T, a log's units. Its decision is a peek at the state after
// it, with Decision::charged = the units taken (rounded down for the bucket and GCRA's
// doubles).
inline std::uint64_t PenaltyBound(const Policy& p) {
  return 2 * p.Capacity();
}
inline std::uint64_t OverageBound(const Policy& p) {
  return p.Capacity() + p.DebtBound();
}
// Whole units of a double amount taken (floor, with the shared epsilon).
inline std::uint64_t ChargedUnits(double taken) {
  const double whole = taken + kEpsilon;
  return whole >= 1 ? static_cast<std::uint64_t>(whole) : 0;
}
Decision FixedWindowCharge(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                           std::uint64_t cost, std::uint64_t bound, FixedWindowState* out,
                           Micros* expires);
Decision SlidingWindowCounterCharge(const Policy& p, const SlidingCounterState& in, bool fresh,
                                    Micros now, std::uint64_t cost, std::uint64_t bound,
                                    SlidingCounterState* out, Micros* expires);
Decision TokenBucketCharge(const Policy& p, const TokenBucketState& in, bool fresh, Micros now,
                           std::uint64_t cost, std::uint64_t bound, TokenBucketState* out,
                           Micros* expires);
Decision GcraCharge(const Policy& p, const GcraState& in, bool fresh, Micros now,
                    std::uint64_t cost, std::uint64_t bound, GcraState* out, Micros* expires);
Decision SlidingWindowLogCharge(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                                std::uint64_t bound, Micros* expires);

// --- usage reservations (StoreCheck::usage_id, StoreOp::kSettle; issue #21 item 3) ---
// How long a reservation's record may be kept (StoreCheck::usage_ttl), and the
// limiter's default (Limiter::ReserveUsage with settle_within 0).
inline constexpr Micros kMinUsageTtl = 1'000;
inline constexpr Micros kMaxUsageTtl = 366LL * 24 * 3600 * 1'000'000;
inline constexpr Micros kDefaultUsageTtl = 15LL * 60 * 1'000'000;

// The decision `d` of a key that is blocked for `left` more microseconds: denied (no
// reservation wait), nothing remaining, retry_after and reset_after at least `left`.
void ApplyBlock(Decision* d, Micros left);

// --- carry-over (Policy::on_change; issue #12 item 4) ---
// The parameters a state was written under, as the stores record them with a state
// written by a policy whose on_change is not kAsIs: doubles, exactly what the Lua
// scripts pack (limit, window in us, capacity).
struct WrittenUnder {
  double limit = 0;
  double window = 0;
  double cap = 0;
};
WrittenUnder ParamsOf(const Policy& p);
// True when `w` is what `p` would record (nothing to carry over).
bool SameParams(const Policy& p, const WrittenUnder& w);

// kProportional conversions of a state written under `w` (!SameParams) into one under
// `p`, applied before the decision (the stores write the result only when the request
// commits, like any decision). Each returns false when the state is to be taken as
// fresh instead (a window algorithm whose window changed). kReset never converts: the
// state is fresh; kAsIs never converts: the state is used as it is.
//  - window algorithms: every count c becomes min(limit, ceil(c * limit / w.limit));
//  - token bucket: refilled at the old rate up to t = max(now, last), capped at the old
//    capacity, then scaled by capacity / w.cap; `last` becomes t;
//  - GCRA: the TAT's distance from now, d = tat - now, becomes d * tau / old tau
//    (tau = window / limit * capacity); a TAT at or before now stays.
// ceil(c * limit / w.limit), at most the new limit (a count over its old limit, kept
// as_is before, is "all used", not more): the window algorithms' count scaling.
std::uint64_t CarryScaleCount(std::uint64_t c, const Policy& p, const WrittenUnder& w);
bool CarryFixedWindow(const Policy& p, const WrittenUnder& w, FixedWindowState* s);
bool CarrySlidingWindowCounter(const Policy& p, const WrittenUnder& w, SlidingCounterState* s);
bool CarryTokenBucket(const Policy& p, const WrittenUnder& w, Micros now, TokenBucketState* s);
bool CarryGcra(const Policy& p, const WrittenUnder& w, Micros now, GcraState* s);

}  // namespace sluice::core

// --- concurrency limits (issue #12 item 1) ---
namespace sluice::core {

// The permits of a key: core/permit_set.h.

// Concurrency limit, one function per operation. Each first drops the permits that
// expired by `now` (expires <= now). Then:
//  - Concurrency (acquire, cost 1; 0 peeks): allowed <=> held + 1 <= limit; remaining
//    = free slots after it; retry_after (denied) = until enough permits expire for one
//    slot; reset_after = until the last held permit expires (0 when none). The permit
//    is held only when `commit` is true (ConcurrencyCommit otherwise, once the batch
//    allows); an id already held is set anew (one entry);
//  - ConcurrencyRelease: allowed <=> the permit was held; it is removed;
//  - ConcurrencyExtend: allowed <=> the permit was held; it now expires at now + lease.
// `*expires`: when the set will be empty (every held permit expired): now if empty.
Decision Concurrency(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                     std::uint64_t cost, bool commit, Micros* expires);
Decision ConcurrencyRelease(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                            Micros* expires);
Decision ConcurrencyExtend(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                           Micros* expires);
// Holds `id` from `now` until now + lease (an acquire that was decided with commit false).
void ConcurrencyCommit(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                       Micros* expires);

}  // namespace sluice::core
