// Internal: the module's decisions, with no Redis in them. One group of a parsed request
// (request.h) is decided on the values its keys hold, through the algorithms' one C++
// source each (core/algorithm_ops.h), and comes back as the values to write (each with
// its TTL) and the reply's integers. The states are the Lua scripts' layouts
// (docs/redis.md, "Key layout"; state.cc reads and writes them), so a keyspace moves
// between the module and the scripts while it is live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/module/request.h"

namespace sluice::redis_module {

// What a key holds when the group reads it.
struct StoredValue {
  bool present = false;    // false: no such key
  std::string_view bytes;  // a string's bytes (valid during DecideGroup)
};

// A state's bytes (the longest layout is a sliding log's inline form, 153), inline: no
// allocation per write.
struct StateBytes {
  char data[160];
  std::uint8_t size = 0;
  std::string_view view() const { return {data, size}; }
};

struct ModuleWrite {
  std::size_t check = 0;  // the check it is for
  StateBytes value;
  long long ttl_ms = 1;  // >= 1: every key is written with a TTL
  // The key's TTL is already this write's (a live state with the same expiry, as a
  // script's INCRBY or SETRANGE leaves it): the value changes, the TTL stays.
  bool keep_ttl = false;
  bool block = false;  // to the check's block key (its block's end), not its state key
};

class LogCommands;  // sliding_log.h

// prelude.lua's ttl_ms: until `expires`, at least 1 ms, plus the caller-time pad.
long long TtlMs(Micros expires, Micros now, long long pad_ms);

// Decides group `g` of `r` at `now` on `values` (one per check of the group, in order)
// and `blocks` (what each check's block key holds; not present for a check without
// one): all or nothing as the Lua group runner (a refund and a penalty apply per
// check; a block starts at once, as penalties.lua's apply_block writes it). Appends the
// writes, in order, and the reply's integers (redis/reply.cc's encoding). A sliding
// log's sorted set is read and written through `logs` as its check is decided
// (sliding_log.h).
void DecideGroup(const ModuleRequest& r, const ModuleGroup& g, Micros now,
                 std::span<const StoredValue> values, std::span<const StoredValue> blocks,
                 LogCommands& logs, std::vector<ModuleWrite>* writes,
                 std::vector<long long>* reply);

}  // namespace sluice::redis_module
