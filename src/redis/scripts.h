// Internal: the Lua scripts that decide checks, embedded at build time from
// src/redis/lua/*.lua by embed_lua.cmake (see lua/prelude.lua for the batch script's
// structure, lua/runner.lua for the KEYS/ARGV layout all but the lean ones share, and
// lua/single_head.lua for why one-check calls have scripts of their own).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/policy.h"

namespace sluice::redis {

// A script's source, as loaded with SCRIPT LOAD, and its SHA1 in hex, as EVALSHA
// expects it.
struct Script {
  std::string_view source;
  std::string_view sha;
};

// Decides any batch of checks (any algorithms, all or nothing).
const Script& BatchScript();
// Decides several callers' independent check groups in one call (lua/runner.lua, one group per
// caller), each group all or nothing.
const Script& CoalescedScript();
// Decides plain fixed-window checks only (lua/lean_fixed_window.lua): one check, a
// batch, or several callers' groups in one call, one INCRBY per decision.
const Script& LeanFixedWindowScript();
// Decides plain GCRA, token-bucket and sliding-counter checks only (lua/lean_bucket.lua):
// a batch, or several callers' groups in one call, one SET ... GET per decision of a
// check alone in its group.
const Script& LeanBucketScript();
// Decides plain sliding-log checks only (lua/lean_sliding_log.lua): one check, a batch,
// or several callers' groups in one call, on the sliding log's state.
const Script& LeanSlidingLogScript();
// Decides exactly one check of algorithm `a`, at a fraction of the batch script's Redis
// CPU: the lean layout for the O(1) algorithms, the group runner's for the sliding log
// and concurrency limits (docs/redis.md, "Wire layout"); the one reply encoding.
const Script& SingleCheckScript(Algorithm a);
// Every script's source, for SCRIPT LOAD on each (re)connect.
std::vector<std::string> AllScripts();

}  // namespace sluice::redis
