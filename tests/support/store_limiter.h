// A Limiter whose every decision is the store's: for tests that tell a store decision
// from a failure-mode one (failover, degraded start, TLS).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "sluice/limiter.h"
#include "sluice/store.h"

namespace sluice::testing {

// A Limiter of one fixed-window policy `name` (`limit` per hour), fail-closed, without
// the deny cache, on `store`: each decision's source is kStore when the store decided it
// and kFailClosed when it could not.
inline Result<std::unique_ptr<Limiter>> StoreOnlyLimiter(std::shared_ptr<Store> store,
                                                         const std::string& name,
                                                         std::uint64_t limit) {
  Policy p = Policy::FixedWindow(name, limit, std::chrono::hours(1));
  p.failure_mode = FailureMode::kFailClosed;
  LimiterOptions lo;
  lo.policies = {p};
  lo.store = std::move(store);
  lo.deny_cache = false;
  return Limiter::Create(std::move(lo));
}

}  // namespace sluice::testing
