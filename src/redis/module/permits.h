// Internal: the module's concurrency limits (algorithm 5), command for command as
// lua/concurrency.lua, on the same key (docs/redis.md, "Key layout"): a sorted set of
// the held permits' ids scored by their expiry in us on the server's clock, its TTL
// covering the last one. Every operation first drops the permits that expired by now.
#pragma once

#include <cstdint>

#include "redis/module/engine.h"
#include "redis/module/sorted_sets.h"

namespace sluice::redis_module {

// A concurrency check of the group being decided: op 4 acquire (cost 0: a peek), 5
// release or 6 extend of `check.permit`.
struct PermitCheck {
  const Policy& policy;
  const ModuleCheck& check;
  Micros now;
  long long pad_ms;
  SortedSets& sets;
};

// DECIDE[5]. An acquire is decided, and committed by PermitCommit when its group is; a
// release or an extend is applied at once, whatever its group does (the runner's solo
// checks), and allowed when the permit was held.
Decision PermitDecide(const PermitCheck& pc);

// COMMIT[5]: an allowed acquire's permit, held until now + the lease, the set's TTL to
// its last expiry, which the acquire's decision `d` gives (reset_after).
void PermitCommit(const PermitCheck& pc, const Decision& d);

}  // namespace sluice::redis_module
