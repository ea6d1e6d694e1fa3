// Internal: the arguments of the native module's command (module/wire.h has the layout;
// docs/redis.md, "The native module"), encoded beside the scripts' (script_wire.h) from
// the same group data (CoalesceInfo::data), so a call carries both and the connection
// sends the one its server can run (connection.h, "The native module").
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "redis/connection.h"
#include "redis/script_wire.h"
#include "sluice/store.h"

namespace sluice::redis {

// True when the module decides `c` doing `k`: every operation of every algorithm (a
// decision under any overage, with or without a usage record, a reservation, refund,
// penalty or settle; a concurrency limit's acquire, release and extend), a sliding
// window log with its ":log" key after its state key, any on_change, with or without
// block_for. (The scripts decide where the server has no module, or `module=off`.)
bool ModuleDecides(const StoreCheck& c, WireKind k);

// The module's arguments after the keys for `groups` (their data, as EncodeCoalesced
// reads it); returns how many.
std::size_t EncodeModuleArgv(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                             std::string& out);

// The module's command for the one group that `script_wire` (EncodeGroup's, EncodeLean's
// or EncodeSingle's output) and `merge` describe, with its KEYS (every check
// ModuleDecides, its keys as the scripts declare them): SLUICE.DECIDE1 for one check
// with one key on the server's clock, else SLUICE.DECIDE.
std::string EncodeModuleCall(const std::string& script_wire, const CoalesceInfo& merge,
                             bool caller_time);

}  // namespace sluice::redis
