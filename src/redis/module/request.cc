// The module's argument parser (request.h; the layout: wire.h).
#include "redis/module/request.h"

#include <algorithm>
#include <charconv>

#include "redis/module/wire.h"

namespace sluice::redis_module {
namespace {

// Caller-time instants and TTL pads the parser accepts: exact in a double, as the Lua
// scripts' numbers are, and far from overflowing any sum the algorithms form.
constexpr long long kMaxAbsNow = 1LL << 53;
constexpr long long kMaxPadMs = 86'400'000;
// Each algorithm the module decides in layout `version`: the four O(1) ones, and from
// layout 3 on the sliding log (its second key) and concurrency limits (permits).
constexpr bool Supported(long long alg, long long version) {
  return (alg >= 0 && alg <= 5 && version >= 3) ||
         alg == static_cast<long long>(Algorithm::kFixedWindow) ||
         alg == static_cast<long long>(Algorithm::kSlidingWindowCounter) ||
         alg == static_cast<long long>(Algorithm::kTokenBucket) ||
         alg == static_cast<long long>(Algorithm::kGcra);
}

// A concurrency limit's operations: 4 acquire (or peek), 5 release, 6 extend.
constexpr bool PermitOp(long long op) {
  return op >= 4 && op <= 6;
}

// Splits `s` at commas into at most `max` integers; returns how many (0: malformed).
// Each field is what ParseInt accepts (an optional '-', then digits, in range), read in
// one pass: every check of every call comes through here.
std::size_t ParseFields(std::string_view s, long long* out, std::size_t max) {
  const char* p = s.data();
  const char* const end = p + s.size();
  for (std::size_t n = 0; n < max;) {
    const bool negative = p != end && *p == '-';
    if (negative) ++p;
    const unsigned long long limit = negative ? 9223372036854775808ULL : 9223372036854775807ULL;
    const char* const digits = p;
    unsigned long long v = 0;
    for (; p != end && *p >= '0' && *p <= '9'; ++p) {
      const unsigned d = static_cast<unsigned>(*p - '0');
      if (v > (limit - d) / 10) return 0;  // out of range
      v = v * 10 + d;
    }
    if (p == digits) return 0;  // no digits
    out[n++] = negative ? static_cast<long long>(0 - v) : static_cast<long long>(v);
    if (p == end) return n;
    if (*p++ != ',') return 0;
  }
  return 0;  // more than max fields
}

bool Fail(std::string* error, std::string what) {
  *error = std::move(what);
  return false;
}

// The most fields a policy argument has in layout `version` (wire.h).
std::size_t PolicyFields(long long version) {
  return version < 2 ? 5 : version < 3 ? 7 : 9;
}

// One policy argument: "algorithm,limit,window_us,capacity,initial[,block_for_us
// [,on_change[,overage,max_debt]]]" (from layout 2 on: the block, then on_change, 0
// as_is, 1 reset, 2 proportional; from layout 3 on: overage, 0 reject, 1 charge, 2
// drain, and the most debt, 0: the capacity).
bool ParsePolicy(std::string_view arg, std::size_t index, long long version, Policy* p,
                 std::string* error) {
  long long f[9];
  // (named only on failure: a valid call builds no strings)
  const auto where = [index] { return "policy " + std::to_string(index); };
  const std::size_t most = PolicyFields(version);
  const std::size_t n = ParseFields(arg, f, most);
  if (n < 5 || n == 8) {
    static const char* const kForms[] = {
        "5 comma-separated integers (algorithm,limit,window,capacity,initial)",
        "5 to 7 comma-separated integers "
        "(algorithm,limit,window,capacity,initial[,block_for[,on_change]])",
        "5, 6, 7 or 9 comma-separated integers "
        "(algorithm,limit,window,capacity,initial[,block_for[,on_change[,overage,max_debt]]])"};
    return Fail(error, where() + " is not " + kForms[most == 5 ? 0 : most == 7 ? 1 : 2]);
  }
  if (!Supported(f[0], version)) {
    return Fail(error, where() + ": algorithm " + std::to_string(f[0]) +
                           " is not one the module decides (0, 2, 3, 4; 1 and 5 from layout 3)");
  }
  if (f[1] < 1 || f[2] < 1 || f[3] < 1) {
    return Fail(error, where() + ": limit, window and capacity must be positive");
  }
  p->name = "module";
  p->algorithm = static_cast<Algorithm>(f[0]);
  p->limit = static_cast<std::uint64_t>(f[1]);
  p->window = f[2];
  const bool bucket = p->algorithm == Algorithm::kTokenBucket || p->algorithm == Algorithm::kGcra;
  if (bucket) {
    p->burst = static_cast<std::uint64_t>(f[3]);
  } else if (f[3] != f[1]) {
    return Fail(error, where() + ": a window algorithm's capacity is its limit");
  }
  if (f[4] != -1) {
    if (p->algorithm != Algorithm::kTokenBucket || f[4] < 0) {
      return Fail(error, where() + ": initial tokens are a token bucket's (-1: none)");
    }
    p->initial_tokens = static_cast<std::uint64_t>(f[4]);
  }
  if (n >= 6) {
    if (f[5] < (n == 6 ? 1 : 0)) {
      return Fail(error, where() + ": block_for must be positive (0 or left out: none)");
    }
    p->block_for = f[5];
  }
  if (n >= 7) {
    if (f[6] < 0 || f[6] > 2) {
      return Fail(error, where() + ": on_change " + std::to_string(f[6]) +
                             " is not 0 (as_is), 1 (reset) or 2 (proportional)");
    }
    p->on_change = f[6] == 1   ? OnChange::kReset
                   : f[6] == 2 ? OnChange::kProportional
                               : OnChange::kAsIs;
  }
  if (n == 9) {
    if (f[7] < 0 || f[7] > 2 || f[8] < 0) {
      return Fail(error, where() + ": overage " + std::to_string(f[7]) +
                             " is not 0 (reject), 1 (charge) or 2 (drain), or max_debt " +
                             std::to_string(f[8]) + " is negative");
    }
    p->overage = static_cast<Overage>(f[7]);
    p->max_debt = static_cast<std::uint64_t>(f[8]);
  }
  if (Status s = ValidatePolicy(*p); !s.ok()) return Fail(error, where() + ": " + s.message());
  return true;
}

// The policy arguments `args` of layout `version` into r->policies. A policy whose
// argument is the same bytes, under the same layout, as the one it was parsed from in an
// earlier call on `r` is kept as it is: most calls send the policies the call before sent
// (a one-check call, the commonest, spends a tenth of the module's own time parsing and
// validating its policy otherwise).
bool ParsePolicies(std::span<const std::string_view> args, long long version, ModuleRequest* r,
                   std::string* error) {
  if (r->policy_version != version) {
    r->policy_args.clear();
    r->policy_version = version;
  }
  r->policies.resize(args.size());
  if (r->policy_args.size() > args.size()) r->policy_args.resize(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i < r->policy_args.size() && r->policy_args[i] == args[i]) continue;
    r->policies[i] = Policy{};
    if (!ParsePolicy(args[i], i, version, &r->policies[i], error)) {
      r->policy_args.resize(std::min(r->policy_args.size(), i));  // (i and on: not known)
      return false;
    }
    if (i < r->policy_args.size()) {
      r->policy_args[i].assign(args[i]);
    } else {
      r->policy_args.emplace_back(args[i]);
    }
  }
  return true;
}

// One check argument: "policy,op,cost,max_wait,last[,now][:permit]"; sets *last. From
// layout 3 on: ops 4-6 (a concurrency limit's acquire, release, extend of the permit
// after the colon), 7 (a decision under an overage or with a usage record, whose fourth
// number is then the record's lifetime) and 8 (a settle).
bool ParseCheck(std::string_view arg, std::size_t index, long long version, const ModuleRequest& r,
                ModuleCheck* c, bool* last, std::string* error) {
  long long f[6];
  const auto where = [index] { return "check " + std::to_string(index); };
  const std::size_t want = r.caller_time ? 6 : 5;
  const std::size_t colon = arg.find(':');
  c->permit = colon == std::string_view::npos ? std::string_view() : arg.substr(colon + 1);
  if (colon != std::string_view::npos) arg = arg.substr(0, colon);
  if (ParseFields(arg, f, 6) != want) {
    return Fail(error, where() + " is not " + std::to_string(want) +
                           " comma-separated integers (policy,op,cost,max_wait,last" +
                           (r.caller_time ? ",now)" : ")"));
  }
  if (f[0] < 0 || static_cast<std::size_t>(f[0]) >= r.policies.size()) {
    return Fail(error, where() + ": policy " + std::to_string(f[0]) + " is not in the list");
  }
  if ((f[1] < 0 || f[1] > 3) && ((f[1] < 4 || f[1] > 8) || version < 3)) {
    return Fail(error, where() + ": op " + std::to_string(f[1]) +
                           " is not 0 (decide), 1 (reserve), 2 (refund), 3 (penalty)" +
                           (version < 3 ? ""
                                        : ", 4-6 (a permit's acquire, release, extend), 7 (decide "
                                          "under an overage) or 8 (settle)"));
  }
  const bool permits =
      r.policies[static_cast<std::size_t>(f[0])].algorithm == Algorithm::kConcurrency;
  // (a refund of a permit does nothing, as REFUND[5]: a permit is given back by its release)
  if ((permits ? !PermitOp(f[1]) && f[1] != 2 : PermitOp(f[1])) ||
      (colon != std::string_view::npos && !PermitOp(f[1]))) {
    return Fail(error, where() +
                           ": a concurrency limit's checks are ops 4-6 (or a refund, 2), "
                           "with a permit after a colon; the rates' are not");
  }
  if (f[2] < 0 || f[3] < 0 || (f[4] != 0 && f[4] != 1)) {
    return Fail(error, where() + ": cost and max_wait must be >= 0 and last 0 or 1");
  }
  if (r.caller_time && (f[5] < -kMaxAbsNow || f[5] > kMaxAbsNow)) {
    return Fail(error, where() + ": now must be within +-2^53 us");
  }
  c->policy = static_cast<std::uint32_t>(f[0]);
  c->op = static_cast<std::uint8_t>(f[1]);
  c->cost = static_cast<std::uint64_t>(f[2]);
  // (op 7's fourth number is its usage record's lifetime, checked by ValidateBatch)
  c->max_wait = c->op == 7 ? 0 : f[3];
  c->usage_ttl = c->op == 7 ? f[3] : 0;
  c->now = r.caller_time ? f[5] : 0;
  *last = f[4] == 1;
  return true;
}

StoreOp OpOf(std::uint8_t op) {
  switch (op) {
    case 2:
      return StoreOp::kRefund;
    case 3:
      return StoreOp::kPenalize;
    case 5:
      return StoreOp::kRelease;
    case 6:
      return StoreOp::kExtend;
    case 8:
      return StoreOp::kSettle;
    default:
      return StoreOp::kDecide;
  }
}

// A usage record's id as the stores validate it: the module reads the record from its
// key and never needs the id itself.
constexpr std::string_view kRecordId = "00000000000000000000000000000000";

// Closes the group [begin, end): one operation, one now, the stores' own validation.
bool CloseGroup(std::span<const std::string_view> keys, std::size_t begin, std::size_t end,
                ModuleRequest* r, std::string* error) {
  ModuleGroup g{begin, end, OpOf(r->checks[begin].op)};
  StoreCheck* checks = r->store_checks.data() + begin;
  if (end - begin > kMaxBatchChecks) {
    return Fail(error, "group at check " + std::to_string(begin) + " has more than " +
                           std::to_string(kMaxBatchChecks) + " checks");
  }
  for (std::size_t i = begin; i < end; ++i) {
    const ModuleCheck& c = r->checks[i];
    if (OpOf(c.op) != g.op || c.now != r->checks[begin].now) {
      return Fail(error, "check " + std::to_string(i) +
                             ": a group's checks share one operation and one now");
    }
    checks[i - begin] = StoreCheck{.policy = &r->policies[c.policy],
                                   .key = keys[c.key],
                                   .cost = c.cost,
                                   .permit = c.permit,
                                   .max_wait = c.op == 1 ? c.max_wait : 0,
                                   .usage_id = c.record_key >= 0 ? kRecordId : std::string_view(),
                                   .usage_ttl = c.usage_ttl};
    if (c.op != 1 && c.max_wait != 0) {
      return Fail(error, "check " + std::to_string(i) + ": max_wait is for op 1 only");
    }
  }
  const StoreBatch batch{.op = g.op, .checks = {checks, end - begin}, .now = r->checks[begin].now};
  if (Status s = ValidateBatch(batch); !s.ok()) {
    return Fail(error, "group at check " + std::to_string(begin) + ": " + s.message());
  }
  r->groups.push_back(g);
  return true;
}

}  // namespace

bool ParseInt(std::string_view s, long long* v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::size_t ModuleKeyCount(std::span<const std::string_view> args) {
  long long n = 0;
  if (args.empty() || !ParseInt(args[0], &n) || n < 1 ||
      static_cast<unsigned long long>(n) > redis::kModuleMaxKeys ||
      static_cast<std::size_t>(n) + 1 > args.size()) {
    return 0;
  }
  return static_cast<std::size_t>(n);
}

bool ParseModuleRequest(std::span<const std::string_view> args, ModuleRequest* out,
                        std::string* error) {
  ModuleRequest& r = *out;
  // (cleared, not replaced: a request the caller keeps across calls keeps its capacity)
  r.caller_time = false;
  r.pad_ms = 0;
  // (r.policies are kept: ParsePolicies reuses the ones parsed from the same arguments)
  r.checks.clear();
  r.groups.clear();
  r.store_checks.clear();
  const std::size_t nkeys = ModuleKeyCount(args);
  if (nkeys == 0) {
    return Fail(error, "numkeys must be 1-" + std::to_string(redis::kModuleMaxKeys) +
                           " and at most the number of arguments after it");
  }
  const std::span<const std::string_view> keys = args.subspan(1, nkeys);
  std::span<const std::string_view> rest = args.subspan(1 + nkeys);
  long long version = 0, pad = 0, np = 0;
  if (rest.size() < 4 || !ParseInt(rest[0], &version) ||
      version < redis::kModuleOldestWireVersion || version > redis::kModuleWireVersion) {
    return Fail(error, "the layout version must be " +
                           std::to_string(redis::kModuleOldestWireVersion) + "-" +
                           std::to_string(redis::kModuleWireVersion) +
                           " (a client of another sluice version?)");
  }
  if (rest[1] != "" && rest[1] != "c") return Fail(error, "clock must be \"\" or \"c\"");
  r.caller_time = rest[1] == "c";
  if (!ParseInt(rest[2], &pad) || pad < 0 || pad > kMaxPadMs) {
    return Fail(error, "pad_ms must be 0-" + std::to_string(kMaxPadMs));
  }
  r.pad_ms = pad;
  if (!ParseInt(rest[3], &np) || np < 1 || static_cast<std::size_t>(np) > nkeys ||
      static_cast<std::size_t>(np) > redis::kModuleMaxPolicies) {
    return Fail(error, "the number of policies must be 1 to numkeys");
  }
  rest = rest.subspan(4);
  // After the policies, one check per key, but for the log, block and record keys.
  if (rest.size() <= static_cast<std::size_t>(np) ||
      rest.size() - static_cast<std::size_t>(np) > std::min(nkeys, redis::kModuleMaxChecks)) {
    return Fail(error, "expected " + std::to_string(np) + " policies and 1-" +
                           std::to_string(nkeys) + " checks after the head, got " +
                           std::to_string(rest.size()) + " arguments");
  }
  if (!ParsePolicies(rest.first(static_cast<std::size_t>(np)), version, &r, error)) return false;
  rest = rest.subspan(r.policies.size());
  const std::size_t nchecks = rest.size();
  r.checks.resize(nchecks);
  r.store_checks.resize(nchecks);
  std::size_t begin = 0, key = 0;
  for (std::size_t i = 0; i < nchecks; ++i) {
    bool last = false;
    ModuleCheck& c = r.checks[i];
    if (!ParseCheck(rest[i], i, version, r, &c, &last, error)) return false;
    const bool block = r.policies[c.policy].block_for > 0;
    const bool record = c.op == 8 || c.usage_ttl > 0;
    const bool log = r.policies[c.policy].algorithm == Algorithm::kSlidingWindowLog;
    if (key + 1 + (log ? 1 : 0) + (block ? 1 : 0) + (record ? 1 : 0) > nkeys) {
      return Fail(error, "check " + std::to_string(i) + ": numkeys " + std::to_string(nkeys) +
                             " leaves it no key (a check has its state key, then a sliding "
                             "log's \":log\" key, a block's \":b\" key, a usage record's key)");
    }
    c.key = static_cast<std::uint32_t>(key++);
    c.log_key = log ? static_cast<std::int32_t>(key++) : -1;
    c.block_key = block ? static_cast<std::int32_t>(key++) : -1;
    c.record_key = record ? static_cast<std::int32_t>(key++) : -1;
    if (last) {
      if (!CloseGroup(keys, begin, i + 1, &r, error)) return false;
      begin = i + 1;
    }
  }
  if (begin != nchecks) return Fail(error, "the last check must end its group (last = 1)");
  if (key != nkeys) {
    return Fail(error, "numkeys " + std::to_string(nkeys) + " is not the checks' " +
                           std::to_string(key) +
                           " keys (one each, one more for a sliding log, a block and a usage "
                           "record)");
  }
  return true;
}

}  // namespace sluice::redis_module
