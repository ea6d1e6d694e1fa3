// Internal: the module's argument parser (module/wire.h has the layout). A plain C++
// function with no Redis in it, so that tests and the fuzz target (tests/fuzz/
// module_request_fuzz.cc) call it as the module does: every argument is validated here
// (and every check through ValidateBatch, the stores' own validation) before anything
// is read or written, since a crash inside Redis takes Redis down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"
#include "sluice/policy.h"
#include "sluice/store.h"

namespace sluice::redis_module {

struct ModuleCheck {
  std::uint32_t policy = 0;  // index into ModuleRequest::policies
  std::uint32_t key = 0;     // its state key: index into the call's keys
  // Its policy's block key (block_for > 0): index into the keys; -1: none.
  std::int32_t block_key = -1;
  // A sliding window log's sorted set (its ":log" key): index into the keys; -1: none.
  std::int32_t log_key = -1;
  // Its usage record's key (op 7 with a record lifetime, op 8): index into the keys; -1:
  // none.
  std::int32_t record_key = -1;
  // redis::WireKind: 0 decide, 1 reserve, 2 refund, 3 penalty, 4-6 a permit's acquire,
  // release, extend, 7 decide under an overage or with a usage record, 8 settle
  std::uint8_t op = 0;
  std::uint64_t cost = 0;
  Micros max_wait = 0;
  Micros usage_ttl = 0;     // op 7: how long its usage record is kept (0: no record)
  std::string_view permit;  // ops 4-6: the permit's id (in the call's arguments)
  Micros now = 0;           // caller-time mode: the group's now
};

struct ModuleGroup {
  std::size_t begin = 0, end = 0;  // [begin, end) of ModuleRequest::checks
  // kDecide (ops 0, 1, 4, 7), kRefund (2), kPenalize (3), kRelease (5), kExtend (6) or
  // kSettle (8)
  StoreOp op = StoreOp::kDecide;
};

struct ModuleRequest {
  bool caller_time = false;
  long long pad_ms = 0;
  std::vector<Policy> policies;
  // The arguments the first policy_args.size() policies were parsed from, under layout
  // policy_version: a later call on this request that sends the same bytes keeps them
  // (ParseModuleRequest).
  std::vector<std::string> policy_args;
  long long policy_version = 0;
  std::vector<ModuleCheck> checks;
  std::vector<ModuleGroup> groups;
  // The checks as the stores' ValidateBatch takes them (the parser's own scratch).
  std::vector<StoreCheck> store_checks;
};

// True when all of `s` is one decimal integer in range (an optional '-', then digits),
// read into `*v`: every integer argument the module reads.
bool ParseInt(std::string_view s, long long* v);

// The number of keys of a call whose arguments after the command name are `args`
// (args[0] is numkeys), or 0 when numkeys is not a count those arguments hold.
std::size_t ModuleKeyCount(std::span<const std::string_view> args);

// Parses the arguments after the command name (args[0] is numkeys, then the keys). On
// failure returns false with `*error` naming the argument and what is wrong with it.
bool ParseModuleRequest(std::span<const std::string_view> args, ModuleRequest* out,
                        std::string* error);

}  // namespace sluice::redis_module
