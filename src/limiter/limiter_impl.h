// Internal to the limiter layer: sluice::Limiter's state, shared by limiter.cc (checks,
// refunds, penalties), reservation.cc (waiting) and permit.cc (concurrency limits).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "decide/decider.h"
#include "sluice/limiter.h"

namespace sluice {
namespace limiter_impl {

inline constexpr std::size_t kMaxChecks = kMaxBatchChecks;

// Storage for up to N objects of a trivially copyable type, left uninitialised: the
// hot path fills the entries it uses instead of zeroing all N.
template <typename T, std::size_t N>
class Scratch {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  T* data() { return reinterpret_cast<T*>(bytes_); }
  T& operator[](std::size_t i) { return data()[i]; }

 private:
  alignas(T) unsigned char bytes_[sizeof(T) * N];
};

}  // namespace limiter_impl

struct Limiter::Impl {
  LimiterOptions options;
  // The scaled-down policies the local fallback enforces, by policy index.
  std::vector<Policy> fallback_policies;
  decide::Decider decider;

  static decide::Options DeciderOptions(const LimiterOptions& o) {
    decide::Options d;
    d.store = o.store;
    d.clock = o.clock;
    d.deny_cache = o.deny_cache;
    d.deny_cache_bytes = o.deny_cache_max_keys * 64;
    return d;
  }

  explicit Impl(LimiterOptions o) : options(std::move(o)), decider(DeciderOptions(options)) {
    for (const Policy& p : options.policies) {
      fallback_policies.push_back(decide::FallbackPolicy(p));
      has_concurrency = has_concurrency || p.algorithm == Algorithm::kConcurrency;
    }
  }

  // Acquire(checks) with StoreCheck::max_wait = `max_wait` (0: a plain decision), and
  // AcquirePermit when `permit` is not empty: then every check of a concurrency policy
  // takes a slot for `permit` (its cost is 1).
  // ReserveUsage when `usage_id` is not empty: every check is recorded under it for
  // `usage_ttl` (StoreCheck::usage_id).
  Result<Decision> Decide(std::span<const Check> checks, Micros max_wait,
                          std::span<Decision> per_check, std::string_view permit = {},
                          std::string_view usage_id = {}, Micros usage_ttl = 0);

  // AcquireWaiting's lines: the callers waiting on the same checks (policy and key
  // pairs), in arrival order, each with the time it is due to try (again). A caller
  // tries only when no caller ahead of it is due: callers who wake at the same moment
  // (a window opening) try in arrival order. Only callers of AcquireWaiting queue.
  struct Waiter {
    std::uint64_t ticket;
    Micros due;
  };
  struct Line {
    std::uint64_t next = 0;
    std::vector<Waiter> waiters;  // arrival order
  };
  std::mutex line_mu;
  std::condition_variable line_cv;
  std::unordered_map<std::string, Line> lines;

  // A place in a line of Limiter::Impl (joined on construction, left on destruction).
  class LinePlace {
   public:
    LinePlace(Impl& impl, std::string key, Micros due);
    ~LinePlace();
    LinePlace(const LinePlace&) = delete;
    LinePlace& operator=(const LinePlace&) = delete;
    // Blocks until no caller ahead is due at the clock's now, or `cancel` is cancelled
    // (returns false). Callers ahead that are due are trying now: the wait is short.
    bool AwaitTurn(const Clock& clock, CancellationToken* cancel);
    // Sets when this caller tries again, and lets those behind it go.
    void SetDue(Micros due);
    void Leave();

   private:
    Impl& impl_;
    std::string key_;
    std::uint64_t ticket_ = 0;
    bool in_line_ = true;
  };

  // --- concurrency limits (issue #12 item 1) ---
  bool has_concurrency = false;
  std::atomic<std::uint64_t> permit_release_errors{0};
};

}  // namespace sluice
