// sluice/policy.h: what a limit is.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/status.h"

namespace sluice {

// The rate limiting algorithms. docs/algorithms.md explains each one, its state
// and its error bounds.
enum class Algorithm : std::uint8_t {
  // Counter per epoch-aligned window. Cheapest; up to 2x `limit` can pass across a
  // window boundary (documented behaviour, not a bug).
  kFixedWindow = 0,
  // Exact: a log of the requests of the last `window`. Memory O(limit) per key.
  kSlidingWindowLog = 1,
  // Previous window weighted by the part of it still inside the sliding window,
  // plus the current window. Two counters; a small, bounded error.
  kSlidingWindowCounter = 2,
  // Tokens refill at limit/window per second up to `burst`; each request takes `cost`.
  kTokenBucket = 3,
  // Generic cell rate algorithm: rate limit/window with a burst tolerance; one
  // timestamp of state. Same limits as a token bucket, smaller state.
  kGcra = 4,
  // --- concurrency limits (issue #12 item 1) ---
  // Not a rate: at most `limit` permits held at once per key (in flight), each one
  // until it is released or its lease (`window`) passes. Policy::Concurrency;
  // Limiter::AcquirePermit takes a permit (sluice/permit.h). State: the held permits'
  // ids and expiries.
  kConcurrency = 5,
};

// "fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra",
// "concurrency".
const char* AlgorithmName(Algorithm a);
// Parses the names above (and the short forms "fixed", "sliding_log", "sliding_counter",
// "bucket"). Returns InvalidArgument naming the unknown value.
Result<Algorithm> ParseAlgorithm(std::string_view name);

// What the limiter does when the store cannot answer in time (Redis down or slow).
enum class FailureMode : std::uint8_t {
  // Allow the request (ordinary APIs: the limiter must not take the service down).
  kFailOpen = 0,
  // Deny the request (abuse protection, where letting traffic through is worse).
  kFailClosed = 1,
  // Decide with an in-process limiter whose limit is the policy's divided by
  // Policy::fallback_divisor (the number of servers sharing the limit).
  kLocalFallback = 2,
};

// "fail_open", "fail_closed", "local_fallback".
const char* FailureModeName(FailureMode m);
// Parses the names above ("open", "closed", "fallback" too).
Result<FailureMode> ParseFailureMode(std::string_view name);

// --- carry-over (issue #12 item 4) ---
// What a store does when it meets a key's state written under other parameters
// (limit, window or burst) of a policy with the same name: a sluiced reload, or a new
// Limiter with a changed Policy. Applied lazily, per key, when a request meets the
// state. docs/algorithms.md, "Changing a limit", defines each mode per algorithm.
enum class OnChange : std::uint8_t {
  // The state counts as fresh: the full new limit is available.
  kReset = 0,
  // The used fraction is kept: 50 of 100 used is 100 of 200 used under a limit of 200
  // (token bucket: tokens scaled by new/old capacity; GCRA: the TAT's distance from now
  // scaled by new/old burst tolerance). Window algorithms reset when the window changes.
  kProportional = 1,
  // The state is read as it is (what every earlier release did): counts stay, tokens
  // stay (capped at the new capacity), a GCRA TAT stays. The default.
  kAsIs = 2,
};

// "reset", "proportional", "as_is".
const char* OnChangeName(OnChange m);
// Parses the names above. Returns InvalidArgument naming the unknown value.
Result<OnChange> ParseOnChange(std::string_view name);

// --- usage charged after the fact (issue #21 item 3) ---
// What a decision does when its cost does not fit (docs/algorithms.md, "Overage"). Every
// mode denies such a decision (allowed = false); they differ in what it takes.
enum class Overage : std::uint8_t {
  // It takes nothing (admission: the default, and what every earlier release did).
  kReject = 0,
  // It takes its cost anyway, so the key goes into debt, bounded: the key's usage never
  // exceeds Capacity() + max_debt; what would go beyond is dropped (Decision::charged
  // says what was taken). Later requests are denied until refill or the window's roll
  // repays the debt. For costs known after the work (tokens an LLM response used): the
  // report of 5000 tokens against 1000 left is charged, not lost.
  kCharge = 1,
  // It takes what remains: the key's usage goes to exactly its capacity.
  kDrain = 2,
};

// "reject", "charge", "drain".
const char* OverageName(Overage o);
// Parses the names above. Returns InvalidArgument naming the unknown value.
Result<Overage> ParseOverage(std::string_view name);

// The largest cost a check of a policy whose overage is not kReject may have (2^32
// units): such a cost may exceed the capacity (it is charged, not admitted). Above it,
// or above the capacity under kReject, a check is an InvalidArgument.
inline constexpr std::uint64_t kMaxChargeCost = std::uint64_t{1} << 32;

// A named limit. Plain value type; validate with ValidatePolicy (Limiter::Create does).
//
// Every algorithm is configured as `limit` requests per `window`:
//  - window algorithms allow `limit` units of cost per window;
//  - token bucket and GCRA refill at limit/window units per microsecond (so 0.5/s is
//    limit=1, window=2s) up to `burst` units, which is also the largest cost.
struct Policy {
  // Identifies the policy in keys, headers and metrics: 1-64 chars of [A-Za-z0-9_.-].
  std::string name;
  Algorithm algorithm = Algorithm::kSlidingWindowCounter;
  // Units allowed per window (window algorithms) or refilled per window (bucket, GCRA);
  // for a concurrency policy, the most permits held at once (max_in_flight).
  std::uint64_t limit = 0;
  // Window length or refill period, in microseconds; at least 1 ms, at most 366 days.
  // For a concurrency policy: the permits' lease.
  Micros window = 0;
  // Token bucket capacity / GCRA burst. 0 means "same as limit". Ignored by window
  // algorithms.
  std::uint64_t burst = 0;
  // Token bucket only: tokens in a new bucket. Default: full. Below the capacity, a
  // bucket is new when it has no state or has stayed full for a whole window, and a
  // request on a new bucket starts it even when denied (docs/algorithms.md), so that
  // dropping a key's state never changes a decision.
  std::optional<std::uint64_t> initial_tokens;
  // What to do when the store fails.
  FailureMode failure_mode = FailureMode::kFailOpen;
  // kLocalFallback: how many servers share the limit; the local limit is
  // ceil(limit / fallback_divisor) (and likewise burst).
  std::uint32_t fallback_divisor = 1;
  // Decide and report, but always allow (Decision::shadow_denied says what would
  // have happened).
  bool shadow = false;
  // Hot-key leases (docs/algorithms.md, "Leases"). 0, the default, is off. Otherwise
  // the most units one process takes from the store in one call for one key, to grant
  // locally without a store call until they are used or `lease_validity` has passed;
  // what is left unused is given back (StoreOp::kRefund). The lease size adapts to the
  // key's observed rate in this process, from the caller's cost up to this bound, and
  // never exceeds what the store reported remaining. Only single-check decisions use
  // leases (Acquire of one policy, or one check); multi-check calls go to the store.
  // Contract: over-admission is at most the units leased but not yet used, summed over
  // processes (each process holds at most one lease per key: `lease` units); a lease
  // sees no change made by others (Reset, refunds) for up to its validity. Fixed window
  // and sliding window counter: none, a lease never outlives its window. Not for
  // sliding_window_log (an exact algorithm). At most the policy's capacity.
  std::uint64_t lease = 0;
  // How long one lease may be used, in microseconds. 0 means window / 10; at most
  // window / 10. A lease also ends at the end of the window it was taken in (fixed
  // window, sliding window counter).
  Micros lease_validity = 0;
  // Blocks (docs/library.md, "Penalties and blocks"). 0, the default, is off.
  // Otherwise, in microseconds (at most 366 days): once a request of a key is denied by
  // this policy (or Limiter::Penalize leaves the key over its limit), every request of
  // the key is denied for block_for from that moment, even when its budget has come
  // back; the decision's retry_after is the time left of the block (or the algorithm's
  // own retry time, if later). Denials during a block do not extend it; Reset ends it.
  // Not with `lease` (a lease decides locally and would not see the block).
  Micros block_for = 0;
  // Carry-over: what happens to a key's state written under other parameters of a
  // policy with this name (see OnChange). Only the default, kAsIs, applies to
  // sliding_window_log. A policy with another mode makes its stores record the
  // parameters with each state they write (on Redis: the batch script, never a
  // one-check lean script). A state that records no parameters (written under kAsIs, or
  // by an earlier release) is taken as written under the current ones.
  OnChange on_change = OnChange::kAsIs;
  // What a decision whose cost does not fit does (see Overage). Not for concurrency
  // policies (only kReject), nor with `lease` (a lease decides locally, without the
  // store that keeps the debt).
  Overage overage = Overage::kReject;
  // kCharge: the most units of debt a key may carry, so that its usage never exceeds
  // Capacity() + max_debt. 0, the default, means Capacity() (a key at most one capacity
  // in debt). At most 10^12; a sliding_window_log at most its limit (its log holds the
  // debt as entries); a token bucket or GCRA must repay it within 366 days at
  // limit/window. Only with Overage::kCharge (InvalidArgument otherwise).
  std::uint64_t max_debt = 0;

  // The largest cost one request may have: burst for bucket/GCRA, limit otherwise.
  std::uint64_t Capacity() const;
  // The debt bound in effect: max_debt, or Capacity() when it is 0; 0 unless kCharge.
  std::uint64_t DebtBound() const;
  // The most a check of this policy may cost: Capacity() under kReject, else
  // max(Capacity(), kMaxChargeCost).
  std::uint64_t MaxCost() const;

  // Convenience constructors. `window`/`per` accept any std::chrono duration.
  static Policy FixedWindow(std::string name, std::uint64_t limit,
                            std::chrono::microseconds window);
  static Policy SlidingWindowLog(std::string name, std::uint64_t limit,
                                 std::chrono::microseconds window);
  static Policy SlidingWindowCounter(std::string name, std::uint64_t limit,
                                     std::chrono::microseconds window);
  // A bucket of `capacity` tokens refilled with `tokens` every `per`.
  static Policy TokenBucket(std::string name, std::uint64_t capacity, std::uint64_t tokens,
                            std::chrono::microseconds per);
  // `limit` per `window`, with up to `burst` at once.
  static Policy Gcra(std::string name, std::uint64_t limit, std::chrono::microseconds window,
                     std::uint64_t burst);
  // --- concurrency limits (issue #12 item 1) ---
  // At most `max_in_flight` permits held at once per key; a permit not released within
  // `lease` expires by itself (so a crashed holder cannot leak capacity), unless it is
  // extended (Permit::Extend). limit = max_in_flight (1..1000000), window = lease (at
  // least 1 ms; 0 or negative is an error naming the lease).
  static Policy Concurrency(std::string name, std::uint64_t max_in_flight,
                            std::chrono::microseconds lease);
};

// Checks every field of `p`; the error message names the policy and the field,
// e.g. "policy 'api': window must be at least 1ms (got 0us)".
Status ValidatePolicy(const Policy& p);

// Parses a rate such as "100/min", "10/s", "0.5/s", "1000/day", "5/10s".
// Units: ms, s, sec, m, min, h, hour, d, day (optionally with a count: "10s").
// A decimal count becomes an equivalent integer limit over a longer window.
struct Rate {
  std::uint64_t limit = 0;
  Micros window = 0;
};
Result<Rate> ParseRate(std::string_view text);

// Parses a duration such as "250ms", "1s", "10m", "1h", "1d". Returns microseconds.
Result<Micros> ParseDuration(std::string_view text);

}  // namespace sluice
