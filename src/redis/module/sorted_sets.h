// Internal: the sorted sets a module call reaches while it decides (a sliding window
// log's ":log" key, a concurrency limit's permit set), through the Redis commands the
// scripts call on them, in the scripts' order: in the module RedisModule_Call
// (sluice_module.cc, which replicates each write as the scripts' effects replication
// does), in the fuzz target an in-memory set. No Redis in this header.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/module/state.h"

namespace sluice::redis_module {

// A command's reply: its integer, or its array's strings (ZRANGE's members, each
// followed by its score WITHSCORES), or a bulk string's one item (a null reply: none).
struct SetReply {
  long long integer = 0;
  std::vector<std::string> items;
};

// The score of `r`'s entry `i` (a ZRANGE ... WITHSCORES reply: member, score, ...), as
// the scripts read it (tonumber); false when there is none, or it is not an integer a
// sluice set holds.
inline bool ReplyScore(const SetReply& r, std::size_t i, Micros* at) {
  double v = 0;
  if (r.items.size() <= i || !LuaNumber(r.items[i], &v) || !WholeNumber(v)) return false;
  *at = static_cast<Micros>(v);
  return true;
}

// The sorted sets of a call.
class SortedSets {
 public:
  virtual ~SortedSets() = default;
  // Runs `command` on key `key` (an index into the call's keys) with `args` after it;
  // `write`: a write, replicated. False when it failed (a key of another type), as a
  // script's redis.call fails: the call then fails (Fail), and every later Run does
  // nothing and returns false.
  virtual bool Run(const char* command, std::uint32_t key, std::span<const std::string_view> args,
                   bool write, SetReply* out) = 0;
  // Fails the call with `why` (a set whose entries are not what sluice writes).
  virtual void Fail(std::string why) = 0;
};

// An integer as the scripts format it (int(): '%d'), as a command's argument.
struct Digits {
  char buf[24];
  std::size_t n = 0;
  Digits() = default;
  explicit Digits(long long v) { Set(v); }
  void Set(long long v) {
    n = static_cast<std::size_t>(std::to_chars(buf, buf + sizeof(buf), v).ptr - buf);
  }
  std::string_view view() const { return {buf, n}; }
};

}  // namespace sluice::redis_module
