// Internal: the Lua scripts that decide checks, embedded at build time from
// src/redis/lua/*.lua by embed_lua.cmake (see lua/prelude.lua for the batch script's
// structure, lua/dispatch.lua for the KEYS/ARGV layout all of them share, and
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
// Decides several callers' independent check groups in one call (lua/coalesced.lua),
// each group all or nothing.
const Script& CoalescedScript();
// Decides exactly one check of algorithm `a`, with the batch script's arguments and
// reply, at a fraction of its Redis CPU.
const Script& SingleCheckScript(Algorithm a);
// Every script's source, for SCRIPT LOAD on each (re)connect.
std::vector<std::string> AllScripts();

}  // namespace sluice::redis
