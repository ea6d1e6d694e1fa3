#include "memory/carry.h"

namespace sluice::memory_internal {

bool CarryOver(const Policy& p, ParamsRegistry& registry, std::uint32_t id, Micros now, State* in) {
  if (p.on_change == OnChange::kAsIs) return true;
  if (p.on_change == OnChange::kReset) return false;
  // Only word algorithms have a mode but kAsIs (ValidatePolicy).
  return core::WordOpsOf(p.algorithm)->carry(p, registry.Get(id), now, &in->word);
}

}  // namespace sluice::memory_internal
