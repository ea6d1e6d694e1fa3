// Penalties (Limiter::Penalize): forced consumption, bounded at twice the capacity,
// then a peek at the state after it. Blocks (Policy::block_for): ApplyBlock.
//
// Each penalty runs its algorithm three times: a peek to normalise the state as a
// decision would (window roll, refill, time raised), the forced change, and a peek at
// the result, whose decision is the penalty's answer and whose `expires` is the new
// state's (a peek at a state changes nothing, so its expiry is that state's). The Lua
// penalties (src/redis/lua/penalties.lua) do the same operations on the same doubles.
// Each algorithm's penalty (<Algorithm>Penalize) is in its own file; here, the blocks.
#include <algorithm>

#include "core/algorithms.h"

namespace sluice::core {

void ApplyBlock(Decision* d, Micros left) {
  d->allowed = false;
  d->remaining = 0;
  d->retry_after = std::max(d->retry_after, left);
  d->reset_after = std::max(d->reset_after, left);
  d->wait = 0;  // reservations: a blocked key reserves nothing (as lua/penalties.lua answers)
}

}  // namespace sluice::core
