// Internal: the decide scripts' arguments (docs/redis.md, "Wire layout"). Two layouts:
// the group runner's (lua/runner.lua: the batch script, the coalesced script, and the
// one-check scripts of the sliding log and of concurrency limits), all numbers but a
// permit id; and the lean one-check scripts' (lua/single_head.lua). Every script answers
// in one reply encoding (reply.h, DecodeDecisions).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "redis/connection.h"
#include "redis/scripts.h"
#include "sluice/store.h"

namespace sluice::redis {

// What a check does, as lua/runner.lua's KIND numbers it.
enum class WireKind : std::uint8_t {
  kDecide = 0,
  kReserve = 1,  // a decision that may take budget up to max_wait ahead
  kRefund = 2,
  kForce = 3,  // a penalty
  kAcquire = 4,
  kRelease = 5,
  kExtend = 6,
  // A decision under an overage (Policy::overage) or with a usage record
  // (StoreCheck::usage_id): followed by the overage bound, the id and its lifetime.
  kOverage = 7,
  kSettle = 8,  // StoreOp::kSettle
};

// What each check of a batch under `op` does on the wire (lua/runner.lua's kinds).
void WireKinds(std::span<const StoreCheck> checks, StoreOp op, WireKind* out);

// A check that a merged call can carry, doing `k`: anything but a refund (whose
// call has no reply to split) and a settle (an unknown record fails its whole call).
// A penalty, a decision under an overage or with a usage record, a permit's operation
// and a check `c` of a policy with block_for merge only into calls of the batch script
// (embed_lua.cmake: the coalesced script has no penalties, charges, blocks or permits):
// MergesIntoBatch.
bool Mergeable(WireKind k);
// True when a merged call with `c` doing `k` is one of the batch script.
bool MergesIntoBatch(const StoreCheck& c, WireKind k);

// A check that the lean one-check script of its algorithm decides (lua/single_head.lua):
// a plain decision of an O(1) algorithm under a policy without on_change or block_for.
bool LeanSingle(const StoreCheck& c, WireKind k);

// A check that the lean fixed-window script decides (lua/lean_fixed_window.lua): a plain
// fixed-window decision (kind decide, no on_change, no block_for) that its counter
// layout holds (a limit below 2^31, cost <= limit; in caller-time mode a window of
// 7 ms or more: fixed_window.lua's `lean`).
bool LeanFixedWindow(const StoreCheck& c, WireKind k, bool caller_time);

// A check that the lean bucket script decides (lua/lean_bucket.lua): a plain GCRA,
// token-bucket or sliding-counter decision (kind decide, no on_change, no block_for, no
// usage record; a token bucket that starts full: its script never starts a bucket it does
// not commit).
bool LeanBucket(const StoreCheck& c, WireKind k);

// A check that the lean sliding-log script decides (lua/lean_sliding_log.lua): a plain
// sliding-log decision (kind decide, no block_for, no usage record, cost <= limit).
bool LeanSlidingLog(const StoreCheck& c, WireKind k);

// The lean scripts a call's checks may share a coalesced call of.
enum class LeanLane : std::uint8_t {
  kNone,
  kFixedWindow,  // every check is LeanFixedWindow
  kSlidingLog,   // every check is LeanSlidingLog, and no key is checked twice
  kBucket,       // every check is LeanBucket
};

// The lean script of `lane` (not kNone).
const Script& LeanScript(LeanLane lane);

// The lean lane of a call of `checks` doing `kinds` (kNone: the group runner's scripts).
LeanLane LeanLaneOf(std::span<const StoreCheck> checks, std::span<const WireKind> kinds,
                    bool caller_time);

// A decide call's script and its EVALSHA.
struct ScriptCall {
  const Script* script = nullptr;
  std::string wire;
  // Coalesced, the call joins the calls of this lane's lean script (its
  // CoalesceInfo::data is the same whatever its own script).
  LeanLane lane = LeanLane::kNone;
};

// The call that decides `checks` (doing `kinds`; not refunds): two or more plain
// fixed-window checks (LeanFixedWindow) run the lean fixed-window script (one INCRBY per
// decision), two or more plain GCRA, token-bucket or sliding-counter checks (LeanBucket)
// the lean bucket script, plain sliding-log checks (LeanSlidingLog, one or more) the lean
// sliding-log script; a check alone (the common call) its algorithm's one-check script
// when it can (LeanSingle), which costs Redis a fraction of the batch script's CPU; a
// sliding log or a concurrency check alone a one-check script that is the group runner
// with only its algorithm defined; anything else the batch script. Records the group in
// `merge` (EncodeGroup).
ScriptCall EncodeCall(std::span<const StoreCheck> checks, std::span<const WireKind> kinds,
                      Micros now, bool caller_time, CoalesceInfo& merge);

// The numbers the runner layout has per check in CoalesceInfo::data, after the group's
// now, each at its offset below: the policy's 7 (algorithm, limit, window, capacity,
// initial tokens or -1, on_change, block_for), then the kind, the cost, max_wait, the
// overage bound (core::OverageBound, capacity + debt; 0: overage reject) and a usage
// record's lifetime (StoreCheck::usage_ttl of a check with a usage_id; else 0).
enum WireCheckNumber : std::size_t {
  kWireAlgorithm,
  kWireLimit,
  kWireWindow,
  kWireCapacity,
  kWireInitial,
  kWireOnChange,
  kWireBlockFor,
  kWireKind,
  kWireCost,
  kWireMaxWait,
  kWireOverageBound,
  kWireUsageTtl,
  kWireCheckNumbers,  // how many
};
// The policy's numbers, first (the runner's policy list).
inline constexpr std::size_t kWirePolicyNumbers = kWireKind;

// Caller-time mode (tests): TTLs are padded so that Redis's own expiry, which runs on
// its clock, never drops state that the caller's clock still needs.
inline constexpr long long kCallerTimeTtlPadMs = 3'600'000;

// The keys a check declares (the state key, a sliding log's ":log", a block's ":b", a
// usage reservation's ":u:<id>").
std::size_t KeyCount(const StoreCheck& c);

// Records `checks` (with their kinds) as one group of a call in `merge.data` (now, then
// kWireCheckNumbers per check) and the number of decisions its reply has.
void GroupData(std::span<const StoreCheck> checks, std::span<const WireKind> kinds, Micros now,
               CoalesceInfo& merge);

// The ARGV of a coalesced call of the groups (lua/runner.lua); returns their number.
std::size_t EncodeCoalesced(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                            std::string& out);

// EVALSHA of `script` (a group runner) over one group, `checks` with `kinds`; records the
// group in `merge` (its data and where its KEYS are in the wire).
std::string EncodeGroup(const Script& script, std::span<const StoreCheck> checks,
                        std::span<const WireKind> kinds, Micros now, bool caller_time,
                        CoalesceInfo& merge);

// EVALSHA of the lean script of `lane` (not kNone) over one group, `checks`, every one
// of them of that lane; records the group in `merge` as EncodeGroup does (the same data,
// so that the module's command and a coalesced call read it alike).
std::string EncodeLean(LeanLane lane, std::span<const StoreCheck> checks, Micros now,
                       bool caller_time, CoalesceInfo& merge);

// The ARGV of a coalesced call of the lean script of `lane`; returns their number.
std::size_t EncodeLeanCoalesced(bool caller_time, LeanLane lane,
                                const std::vector<const CoalesceInfo*>& groups, std::string& out);

// EVALSHA of the lean one-check script of an O(1) algorithm (lua/single_head.lua): KEYS
// the check's key, ARGV the clock mode, limit, window and cost, then the capacity for a
// token bucket or GCRA and the initial tokens for a token bucket: only what the
// algorithm reads (each argument costs Redis CPU). Records the group in `merge` as
// EncodeGroup does, for a coalesced call.
std::string EncodeSingle(const Script& script, const StoreCheck& c, Micros now, bool caller_time,
                         CoalesceInfo& merge);

}  // namespace sluice::redis
