// Internal: the Lua script that decides a batch of checks, embedded at build time
// from src/redis/lua/*.lua (see lua/prelude.lua for its structure and
// lua/dispatch.lua for its KEYS/ARGV layout).
#pragma once

#include <string_view>

namespace sluice::redis {

// The script's source, as loaded with SCRIPT LOAD.
extern const std::string_view kDecideScript;
// Its SHA1 in hex, as EVALSHA expects it.
extern const std::string_view kDecideScriptSha;

}  // namespace sluice::redis
