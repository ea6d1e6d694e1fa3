// Internal: the arguments of the native module's command (module/wire.h has the layout;
// docs/redis.md, "The native module"), encoded beside the scripts' (script_wire.h) from
// the same group data (CoalesceInfo::data), so a call carries both and the connection
// sends the one its server can run (connection.h, "The native module").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "redis/connection.h"
#include "redis/script_wire.h"
#include "sluice/store.h"

namespace sluice::redis {

// True when the module decides `c` doing `k`: a decision (under any overage, with or
// without a usage record), reservation, refund, penalty or settle of any rate algorithm
// (a sliding window log's ":log" key after its state key; any on_change, with or without
// block_for). Concurrency limits (permits) run the Lua scripts.
bool ModuleDecides(const StoreCheck& c, WireKind k);

// The module's arguments after the keys for `groups` (their data, as EncodeCoalesced
// reads it); returns how many.
std::size_t EncodeModuleArgv(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                             std::string& out);

// The module's command for the one group that `script_wire` (EncodeGroup's or
// EncodeSingle's output) and `merge` describe, with its KEYS (every check ModuleDecides:
// its state key, then a sliding log's ":log" key, then its block key when it has one,
// as the scripts declare them).
std::string EncodeModuleCall(const std::string& script_wire, const CoalesceInfo& merge,
                             bool caller_time);

}  // namespace sluice::redis
