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

// Which of a check's keys a write is to.
enum class WriteTo : std::uint8_t {
  kState,   // its state key
  kBlock,   // its block key: the block's end in us
  kRecord,  // its usage record's key
};

struct ModuleWrite {
  std::size_t check = 0;  // the check it is for
  StateBytes value;
  long long ttl_ms = 1;  // >= 1: every key is written with a TTL
  // The key's TTL is already this write's (a live state with the same expiry, as a
  // script's INCRBY or SETRANGE leaves it): the value changes, the TTL stays.
  bool keep_ttl = false;
  WriteTo to = WriteTo::kState;
};

// A usage record (StoreCheck::usage_id) as a decision wrote it.
struct UsageRecord {
  bool settled = false;     // "s" in front: a settle applied it already
  std::uint64_t taken = 0;  // what its decision took
  Micros expires = 0;       // on the server's (or caller's) clock, us
};

class SortedSets;  // sorted_sets.h

// prelude.lua's ttl_ms: until `expires`, at least 1 ms, plus the caller-time pad.
long long TtlMs(Micros expires, Micros now, long long pad_ms);

// Decides group `g` of `r` (not a settle) at `now` on `values` (one per check of the
// group, in order) and `blocks` (what each check's block key holds; not present for a
// check without one): all or nothing as the Lua group runner (a refund and a penalty
// apply per check; a block starts at once, as penalties.lua's apply_block writes it; a
// denied group's checks under an overage are charged; a check with a usage record
// records what it took). Appends the writes, in order, and the reply's integers
// (redis/reply.cc's encoding). A sliding log's sorted set is read and written through
// `sets` as its check is decided (sliding_log.h), as is a concurrency limit's permit set
// (permits.h).
void DecideGroup(const ModuleRequest& r, const ModuleGroup& g, Micros now,
                 std::span<const StoredValue> values, std::span<const StoredValue> blocks,
                 SortedSets& sets, std::vector<ModuleWrite>* writes, std::vector<long long>* reply);

// The record `v` holds (runner.lua's record_usage: "<taken> <expires>", "s" in front
// once settled); false when there is none, it is not a record, or it expired by `now`.
bool ReadUsageRecord(const StoredValue& v, Micros now, UsageRecord* out);

// Settles check `i` of `r` (op 8), whose record is `record`, on what its keys hold now
// (`value`, `block`), as runner.lua's settle_one: above what the reservation took the
// rest is decided (charged per the overage when it does not fit); below it the
// difference is refunded; then a peek. Appends the writes (the record marked settled)
// and the reply's five numbers (the first: applied, not yet settled).
// (Sorted sets through `sets`, as DecideGroup's.)
void SettleCheck(const ModuleRequest& r, std::size_t i, Micros now, const UsageRecord& record,
                 const StoredValue& value, const StoredValue& block, SortedSets& sets,
                 std::vector<ModuleWrite>* writes, std::vector<long long>* reply);

}  // namespace sluice::redis_module
