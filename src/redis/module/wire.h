// Internal: the argument layout of the module's command (docs/redis.md, "The native
// module"), shared by the client's encoder (redis/module_wire.cc) and the module's parser
// (module/request.cc). No dependencies: the module includes it too.
//
//   SLUICE.DECIDE <numkeys> <key>... <version> <clock> <pad_ms> <P> <policy>... <check>...
//
// - keys: each check's state key, in order, followed by its sorted set (the state key +
//   ":log") when it is a sliding window log's, then by its block key (the state key +
//   ":b") when its policy has a block_for, then by its usage record's key (the state key
//   + ":u:" + the reservation id) when it has one: the scripts' KEYS order;
// - version: kModuleWireVersion, or an older layout the module still reads (1: no
//   block_for, no on_change; 2: no sliding window log, no concurrency limit, no overage,
//   no usage record; 3: as 4, without SLUICE.DECIDE1);
// - clock: "" decides on the server's clock; "c" on the caller's (tests only): every
//   check then ends with its group's now (us);
// - pad_ms: extra TTL in ms (caller-time mode: Redis expires keys on its own clock);
// - P policies, each ONE argument "algorithm,limit,window_us,capacity,initial_tokens"
//   (initial -1: a bucket that starts full), then ",block_for_us" when it has one, or
//   ",block_for_us,on_change" (0 or the block; 1 reset, 2 proportional) when it has an
//   on_change, or ",block_for_us,on_change,overage,max_debt" (overage 1 charge, 2
//   drain; Policy::max_debt) when its overage is not reject; algorithm is 0, 2, 3 or 4,
//   or from layout 3 on 1 (the sliding window log, whose on_change the scripts ignore,
//   and so does the module) or 5 (a concurrency limit: its key is its permit set);
// - each check ONE argument "policy,op,cost,max_wait_us,last[,now_us][:permit]": policy
//   indexes the list above from 0, op is redis::WireKind's number (0 decide, 1 decide
//   with max_wait, 2 refund, 3 penalty, 4 a permit's acquire (cost 0: a peek), 5 its
//   release, 6 its extend, of the permit id after the colon; 7 decide under an overage
//   or with a usage record: its fourth number is then the record's lifetime in us, 0 for
//   none; 8 settle), last is 1 on the last check of a group. A release or an extend is
//   applied whatever its group decides. A decision whose policy's overage is not reject
//   and whose cost is not 0 is charged (up to core::OverageBound) when its group is
//   denied; a usage record (`<taken> <expires_us>`, "s" in front once settled) keeps
//   what it took.
// A group is decided and committed all or nothing, then the next one (as the Lua group
// runner); a group of settles finds every record first (one unknown or expired: the
// error NOTFOUND, and nothing is settled), then settles each check on its own. The
// reply is the scripts' (redis/reply.cc, DecodeDecisions).
//
// From layout 4 on, the call of ONE check with ONE key on the server's clock (the
// commonest, a caller's call sent alone) may be sent as
//
//   SLUICE.DECIDE1 <key> <policy> <check>
//
// which is SLUICE.DECIDE 1 <key> <version> "" 0 1 <policy> <check>: five arguments
// fewer for Redis to read (a tenth of such a call's cost, docs/benchmarks.md), its key
// declared statically.
#pragma once

#include <cstddef>

namespace sluice::redis {

inline constexpr const char* kModuleCommand = "SLUICE.DECIDE";
inline constexpr const char* kModuleSingleCommand = "SLUICE.DECIDE1";
// Answers kModuleWireVersion: the handshake's probe (a server without the module, or a
// module of another layout, is decided with Lua).
inline constexpr const char* kModuleVersionCommand = "SLUICE.VERSION";
inline constexpr long long kModuleWireVersion = 4;
// The oldest layout the module still reads (a client that probed an older module
// before it was replaced sends it until it reconnects).
inline constexpr long long kModuleOldestWireVersion = 1;
// Bounds the parser enforces: 256 groups of at most 16 checks (a coalesced call); a
// check has up to four keys (a sliding log's with a block and a usage record).
inline constexpr std::size_t kModuleMaxChecks = 4096;
inline constexpr std::size_t kModuleMaxKeys = 4 * kModuleMaxChecks;
inline constexpr std::size_t kModuleMaxPolicies = 4096;

}  // namespace sluice::redis
