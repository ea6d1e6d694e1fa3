#include "memory/carry.h"

namespace sluice::memory_internal {

bool CarryOver(const Policy& p, ParamsRegistry& registry, std::uint32_t id, Micros now, State* in) {
  if (p.on_change == OnChange::kAsIs) return true;
  if (p.on_change == OnChange::kReset) return false;
  const core::WrittenUnder w = registry.Get(id);
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      return core::CarryFixedWindow(p, w, &in->fixed);
    case Algorithm::kSlidingWindowCounter:
      return core::CarrySlidingWindowCounter(p, w, &in->counter);
    case Algorithm::kTokenBucket:
      return core::CarryTokenBucket(p, w, now, &in->bucket);
    case Algorithm::kGcra:
      return core::CarryGcra(p, w, now, &in->gcra);
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:  // only kAsIs is valid for these (ValidatePolicy)
      break;
  }
  return true;
}

}  // namespace sluice::memory_internal
