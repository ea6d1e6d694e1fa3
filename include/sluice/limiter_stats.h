// sluice/limiter_stats.h: the decision counters a Limiter reports (Limiter::Stats).
#pragma once

#include <cstdint>

namespace sluice {

// How often the limiter had to decide without the store, by reason. Monotonic.
struct LimiterStats {
  std::uint64_t decisions = 0;
  std::uint64_t denied = 0;
  std::uint64_t shadow_denied = 0;
  std::uint64_t deny_cache_hits = 0;
  std::uint64_t store_errors = 0;
  std::uint64_t fail_open = 0;
  std::uint64_t fail_closed = 0;
  std::uint64_t local_fallback = 0;
  // Hot-key leases (Policy::lease): decisions allowed from a lease without a store
  // call, leases taken from the store, and leases given back (StoreOp::kRefund).
  std::uint64_t lease_hits = 0;
  std::uint64_t lease_grants = 0;
  std::uint64_t lease_returns = 0;
  // --- concurrency limits (issue #12 item 1) ---
  // Permits whose release by a Permit's destructor failed (they expire after their lease).
  std::uint64_t permit_release_errors = 0;
};

}  // namespace sluice
