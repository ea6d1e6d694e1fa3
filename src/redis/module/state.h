// Internal: the Lua scripts' state layouts (docs/redis.md, "Key layout"; the codecs in
// src/redis/lua/<algorithm>.lua), read into and written from core::WordState, for the
// module. Each read follows its script's rules, so both decide the same on one key:
// what counts as this algorithm's state, and when it is back to full (fresh).
#pragma once

#include "core/algorithm_ops.h"
#include "redis/module/engine.h"

namespace sluice::redis_module {

enum class Layout : std::uint8_t {
  kNone,      // absent, another algorithm's, or a value no sluice version writes
  kCounter,   // the fixed window's integer counter
  kPacked,    // struct.pack of the fields ('<Bddd', ...; GCRA's older '<Bdd')
  kRecorded,  // the carry-over layout: the fields, then limit, window and capacity
  kNumber,    // GCRA's TAT as a plain number
};

struct ReadState {
  Layout layout = Layout::kNone;
  // A state of p's algorithm that is not back to full: a decision decides on it as it
  // is (a recorded one too, as the scripts read it for a policy without on_change).
  bool live = false;
  // A recorded state written under p's own parameters: refunds and penalties use a
  // recorded state only then (word_state.lua's load()).
  bool same_params = false;
  // A recorded state's parameters (a carry-over converts from them).
  core::WrittenUnder under;
  core::WordState word;
  // When a live state is back to full: the key's TTL, as its writer set it.
  Micros expires = 0;
};

// Lua 5.1's tonumber of a string (luaO_str2d): strtod, a hexadecimal constant, then
// only white space; false when `bytes` is not a number (a value longer than a state's
// never is, here).
bool LuaNumber(std::string_view bytes, double* out);

// A number sluice writes in a sorted set or a log: an integer exact in Lua's doubles (a
// value with another is damaged, and read as such rather than cast out of range).
bool WholeNumber(double v);

// Reads `v` as p's state at `now`.
ReadState Read(const Policy& p, const StoredValue& v, Micros now);

// True when a decision of a fixed window writes the counter (fixed_window.lua's
// `lean`): no on_change, a limit below 2^31, and a window long enough for the counter's
// tag.
bool FixedWindowLean(const Policy& p, long long pad_ms);

// The bytes of `s` (expiring at `expires`) in `layout` (kCounter, kPacked, kRecorded
// or kNumber; kPacked of GCRA is its plain number, the older '<Bdd' is only read).
StateBytes Encode(const Policy& p, const core::WordState& s, Micros expires, Layout layout);

}  // namespace sluice::redis_module
