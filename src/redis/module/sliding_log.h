// Internal: the module's sliding window log (algorithm 1), operation for operation as
// the batch script's (lua/sliding_window_log.lua, log_inline.lua, log_entries.lua), on
// the same two keys, so a keyspace moves between the module and the scripts while it
// is live (docs/redis.md, "Key layout"):
// - the state key, read by the group as every check's state key is and written through
//   ModuleWrite: the inline form (struct.pack('<Bddd', 1, expires, last_seen, used),
//   then '<dd' (cost, time) per entry, at most kLogInline entries; the ":log" key is not
//   read), or the text form "1 <expires> <last_seen> <used> <seq>";
// - the text form's sorted set (the ":log" key), reached through SortedSets: the Redis
//   commands the script calls, in its order (in the module RedisModule_Call, which
//   replicates each write as the script's effects replication does).
// The inline form, the common case, is decided by core's algorithm (core/
// sliding_window_log.cc) on the entries in the state, with no Redis call; the sorted
// set as the script does it: what left the window trimmed, a denial's retry time by a
// binary search over ranks (issue #11: never a walk of a long log but an older
// member layout's), an inline log that outgrows kLogInline entries, or is refunded,
// spilled into a fresh set (DEL, one ZADD, PEXPIRE). Every key is written with a TTL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/algorithms.h"
#include "redis/module/engine.h"
#include "redis/module/sorted_sets.h"

namespace sluice::redis_module {

// log_inline.lua's INLINE: the most entries an inline log holds.
inline constexpr std::size_t kLogInline = 8;

// One check's log while its group is decided (sliding_window_log.lua's `st`).
struct SlidingLogState {
  bool fresh = true;         // no log of this algorithm in the state key
  bool inline_form = false;  // the entries are here (else in the sorted set)
  bool dirty = false;        // normalised since it was read: flushed if not committed
  bool trimmed = false;      // the sorted set was trimmed up to trimmed_at
  Micros trimmed_at = 0;
  Micros expires = 0, last = 0;
  std::uint64_t used = 0, seq = 0;
  std::size_t count = 0;  // inline entries, oldest first (one more while a commit spills)
  core::LogEntry entries[kLogInline + 1];
};

// A sliding-log check of the group being decided.
struct LogCheck {
  const Policy& policy;
  const ModuleCheck& check;
  std::size_t index;  // its index in the request's checks (ModuleWrite::check)
  Micros now;
  long long pad_ms;
  SortedSets& logs;
  SlidingLogState& state;
  std::vector<ModuleWrite>* writes;
};

// Reads the check's state key `value`, then does its operation: a decision (op 0 or 1,
// DECIDE[1]: a window "reservation" is a plain decision), sets *d and returns true; a
// refund (REFUND[1], written at once) returns false (no reply); a penalty (FORCE[1]
// bounded at core::PenaltyBound, then a peek, its state flushed) sets *d with its
// charged units and returns true. A policy's block is applied by the caller.
bool SlidingLogFirst(const LogCheck& lc, const StoredValue& value, Decision* d);

// A decision's group outcome: logged (COMMIT[1]) when `commit` and it has a cost, else
// what the decision normalised is kept (flush_logs: the state with its TTL kept).
void SlidingLogLast(const LogCheck& lc, bool commit);

// A denied group's overage charge (the runner's `charge`: FORCE[1] bounded at
// core::OverageBound, then a peek at the state after it), after SlidingLogLast: the
// decision, with the units taken in `charged`. A policy's block is applied by the caller.
Decision SlidingLogCharge(const LogCheck& lc);

}  // namespace sluice::redis_module
