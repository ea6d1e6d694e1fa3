// The decide scripts' arguments (script_wire.h; docs/redis.md, "Wire layout").
#include "redis/script_wire.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "core/algorithms.h"

namespace sluice::redis {
namespace {

// A check's number (lua/runner.lua): (((cost' * 2 + big) * 16 + kind) * 4096 + policy)
// * 2 + last, exact in a Lua double: costs from 2^35 on follow as an argument of their
// own (big). 4096 policies: at most 256 groups of 16 checks.
constexpr long long kMaxInlineCost = 1LL << 35;

void AppendNumber(std::string& out, long long v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  AppendBulk(out, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

long long OnChangeNumber(OnChange o) {
  switch (o) {
    case OnChange::kReset:
      return 1;
    case OnChange::kProportional:
      return 2;
    case OnChange::kAsIs:
      break;
  }
  return 0;
}

// Kinds 7 and 8 (lua/runner.lua) carry the overage bound, the usage id and its lifetime.
bool HasUsage(WireKind k) {
  return k == WireKind::kOverage || k == WireKind::kSettle;
}

bool HasPermit(WireKind k) {
  return k == WireKind::kAcquire || k == WireKind::kRelease || k == WireKind::kExtend;
}

// The string a check of `g` carries (its permit or usage record id), or none.
std::string_view IdOf(const CoalesceInfo& g, std::size_t check) {
  return check < g.ids.size() ? std::string_view(g.ids[check]) : std::string_view();
}

std::size_t AppendArgv(bool caller_time, std::span<const CoalesceInfo* const> groups,
                       std::string& out) {
  std::vector<const long long*> policies;
  std::vector<std::uint32_t> index;
  for (const CoalesceInfo* g : groups) {
    for (std::size_t at = 1; at + kWireCheckNumbers <= g->data.size(); at += kWireCheckNumbers) {
      const long long* p = g->data.data() + at;
      std::size_t i = 0;
      while (i < policies.size() && !std::equal(p, p + kWirePolicyNumbers, policies[i])) ++i;
      if (i == policies.size()) policies.push_back(p);
      index.push_back(static_cast<std::uint32_t>(i));
    }
  }
  AppendBulk(out, caller_time ? "c" : "");
  AppendNumber(out, caller_time ? kCallerTimeTtlPadMs : 0);
  AppendNumber(out, static_cast<long long>(policies.size()));
  for (const long long* p : policies) {
    for (std::size_t i = 0; i < kWirePolicyNumbers; ++i) AppendNumber(out, p[i]);
  }
  std::size_t count = 3 + kWirePolicyNumbers * policies.size(), check = 0;
  for (const CoalesceInfo* g : groups) {
    if (caller_time) {
      AppendNumber(out, g->data[0]);
      ++count;
    }
    const std::size_t n = (g->data.size() - 1) / kWireCheckNumbers;
    for (std::size_t i = 0; i < n; ++i) {
      const long long* c = g->data.data() + 1 + i * kWireCheckNumbers;
      const long long kind = c[kWireKind], cost = c[kWireCost];
      const bool big = cost >= kMaxInlineCost;
      const long long last = i + 1 == n ? 1 : 0;
      AppendNumber(
          out, ((((big ? 0 : cost) * 2 + (big ? 1 : 0)) * 16 + kind) * 4096 + index[check++]) * 2 +
                   last);
      ++count;
      if (big) {
        AppendNumber(out, cost);
        ++count;
      }
      if (kind == static_cast<long long>(WireKind::kReserve)) {
        AppendNumber(out, c[kWireMaxWait]);
        ++count;
      } else if (HasPermit(static_cast<WireKind>(kind))) {
        AppendBulk(out, IdOf(*g, i));
        ++count;
      } else if (HasUsage(static_cast<WireKind>(kind))) {
        // The overage bound, then the usage record's id ("": none) and lifetime (kind 7
        // only).
        AppendNumber(out, c[kWireOverageBound]);
        AppendBulk(out, IdOf(*g, i));
        AppendNumber(out, static_cast<WireKind>(kind) == WireKind::kOverage ? c[kWireUsageTtl] : 0);
        count += 3;
      }
    }
  }
  return count;
}

// `*N` and EVALSHA's first three arguments, then the keys of `checks`, recorded in
// `merge`; `nargs` is the number of arguments after the keys.
void AppendHead(const Script& script, std::span<const StoreCheck> checks, std::size_t nargs,
                std::string& out, CoalesceInfo& merge) {
  std::size_t nkeys = 0;
  for (const StoreCheck& c : checks) nkeys += KeyCount(c);
  out.push_back('*');
  out.append(std::to_string(3 + nkeys + nargs));
  out.append("\r\n");
  AppendBulk(out, "EVALSHA");
  AppendBulk(out, script.sha);
  AppendNumber(out, static_cast<long long>(nkeys));
  merge.keys_begin = static_cast<std::uint32_t>(out.size());
  std::string key;
  for (const StoreCheck& c : checks) {
    AppendBulk(out, c.key);
    if (c.policy->algorithm == Algorithm::kSlidingWindowLog) {
      key.assign(c.key).append(":log");
      AppendBulk(out, key);
    }
    if (c.policy->block_for > 0) {  // declared, as Redis asks of every key a script uses
      key.assign(c.key).append(":b");
      AppendBulk(out, key);
    }
    if (!c.usage_id.empty()) {  // a usage reservation's record (same hash tag, same slot)
      key.assign(c.key).append(":u:").append(c.usage_id);
      AppendBulk(out, key);
    }
  }
  merge.keys_end = static_cast<std::uint32_t>(out.size());
  merge.nkeys = static_cast<std::uint32_t>(nkeys);
}

// The lean scripts' ARGV for `groups` (lua/lean_fixed_window.lua, lean_bucket.lua,
// lean_sliding_log.lua), from their CoalesceInfo::data; returns the number of arguments.
std::size_t AppendLeanArgv(bool caller_time, LeanLane lane,
                           std::span<const std::vector<long long>* const> groups,
                           std::string& out) {
  // (a policy here is each check's limit, window and cost; and for the bucket script its
  // algorithm, capacity and initial tokens)
  const std::size_t per_policy = lane == LeanLane::kBucket ? 6 : 3;
  std::vector<std::array<long long, 6>> policies;
  std::vector<std::uint32_t> index;
  for (const std::vector<long long>* d : groups) {
    for (std::size_t at = 1; at + kWireCheckNumbers <= d->size(); at += kWireCheckNumbers) {
      const long long* c = d->data() + at;
      std::array<long long, 6> p{c[kWireLimit], c[kWireWindow], c[kWireCost]};
      if (per_policy == 6) {
        p[3] = c[kWireAlgorithm];
        p[4] = c[kWireCapacity];
        p[5] = c[kWireInitial];
      }
      const auto i = static_cast<std::size_t>(std::find(policies.begin(), policies.end(), p) -
                                              policies.begin());
      if (i == policies.size()) policies.push_back(p);
      index.push_back(static_cast<std::uint32_t>(i));
    }
  }
  // One policy, every check alone in its group (the common coalesced call): P is sent as
  // 0 and the per-check numbers are left out (each is one more argument for Redis to
  // parse and for the script to read).
  const bool uniform =
      policies.size() == 1 && std::all_of(groups.begin(), groups.end(), [](const auto* d) {
        return d->size() == 1 + kWireCheckNumbers;
      });
  AppendBulk(out, caller_time ? "c" : "");
  AppendNumber(out, uniform ? 0LL : static_cast<long long>(policies.size()));
  for (const auto& p : policies) {
    for (std::size_t i = 0; i < per_policy; ++i) AppendNumber(out, p[i]);
  }
  std::size_t count = 2 + per_policy * policies.size(), check = 0;
  for (const std::vector<long long>* d : groups) {
    if (caller_time) {
      AppendNumber(out, (*d)[0]);
      ++count;
    }
    const std::size_t n = uniform ? 0 : (d->size() - 1) / kWireCheckNumbers;
    for (std::size_t i = 0; i < n; ++i) {
      AppendNumber(out, static_cast<long long>(index[check++]) * 2 + (i + 1 == n ? 1 : 0));
      ++count;
    }
  }
  return count;
}

}  // namespace

void WireKinds(std::span<const StoreCheck> checks, StoreOp op, WireKind* out) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Algorithm a = c.policy->algorithm;
    if (op == StoreOp::kRefund) {
      out[i] = WireKind::kRefund;
    } else if (op == StoreOp::kRelease) {
      out[i] = WireKind::kRelease;
    } else if (op == StoreOp::kExtend) {
      out[i] = WireKind::kExtend;
    } else if (a == Algorithm::kConcurrency) {
      out[i] = WireKind::kAcquire;
    } else if (op == StoreOp::kPenalize) {
      out[i] = WireKind::kForce;
    } else if (op == StoreOp::kSettle) {
      out[i] = WireKind::kSettle;
    } else if (!c.usage_id.empty() || (c.cost > 0 && c.policy->overage != Overage::kReject)) {
      // Charged if its batch is denied, or recorded under a usage id: the batch script.
      out[i] = WireKind::kOverage;
    } else if (c.max_wait > 0 && c.cost > 0 &&
               (a == Algorithm::kTokenBucket || a == Algorithm::kGcra)) {
      // Only they take future budget: a window algorithm's reservation is a plain
      // decision (and stays on the lean script, as does a peek).
      out[i] = WireKind::kReserve;
    } else {
      out[i] = WireKind::kDecide;
    }
  }
}

bool Mergeable(WireKind k) {
  return k != WireKind::kRefund && k != WireKind::kSettle;
}

bool MergesIntoBatch(const StoreCheck& c, WireKind k) {
  return k == WireKind::kForce || k == WireKind::kOverage || HasPermit(k) ||
         c.policy->block_for > 0;
}

bool LeanSingle(const StoreCheck& c, WireKind k) {
  const Algorithm a = c.policy->algorithm;
  return k == WireKind::kDecide && a != Algorithm::kSlidingWindowLog &&
         a != Algorithm::kConcurrency && c.policy->block_for == 0 &&
         c.policy->on_change == OnChange::kAsIs;
}

bool LeanFixedWindow(const StoreCheck& c, WireKind k, bool caller_time) {
  const Policy& p = *c.policy;
  // fixed_window.lua's `lean`: limit < 2^31 and window * 2^19 > (PAD + 1) * 1000
  const long long pad = caller_time ? kCallerTimeTtlPadMs : 0;
  return k == WireKind::kDecide && p.algorithm == Algorithm::kFixedWindow &&
         p.on_change == OnChange::kAsIs && p.block_for == 0 && c.usage_id.empty() &&
         p.limit < (std::uint64_t{1} << 31) && c.cost <= p.limit &&
         p.window > (pad + 1) * 1000 / 524288;
}

bool LeanBucket(const StoreCheck& c, WireKind k) {
  const Policy& p = *c.policy;
  return k == WireKind::kDecide &&
         (p.algorithm == Algorithm::kGcra || p.algorithm == Algorithm::kSlidingWindowCounter ||
          (p.algorithm == Algorithm::kTokenBucket &&
           (!p.initial_tokens || *p.initial_tokens >= p.Capacity()))) &&
         p.on_change == OnChange::kAsIs && p.block_for == 0 && c.usage_id.empty();
}

bool LeanSlidingLog(const StoreCheck& c, WireKind k) {
  const Policy& p = *c.policy;
  return k == WireKind::kDecide && p.algorithm == Algorithm::kSlidingWindowLog &&
         p.block_for == 0 && c.usage_id.empty() && c.cost <= p.limit;
}

std::size_t KeyCount(const StoreCheck& c) {
  return 1 + (c.policy->algorithm == Algorithm::kSlidingWindowLog ? 1 : 0) +
         (c.policy->block_for > 0 ? 1 : 0) + (c.usage_id.empty() ? 0 : 1);
}

void GroupData(std::span<const StoreCheck> checks, std::span<const WireKind> kinds, Micros now,
               CoalesceInfo& merge) {
  std::vector<long long>& d = merge.data;
  d.clear();
  d.reserve(1 + kWireCheckNumbers * checks.size());
  d.push_back(static_cast<long long>(now));
  std::uint32_t decisions = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    d.insert(d.end(),
             {static_cast<long long>(p.algorithm), static_cast<long long>(p.limit),
              static_cast<long long>(p.window), static_cast<long long>(p.Capacity()),
              p.initial_tokens ? static_cast<long long>(*p.initial_tokens) : -1LL,
              OnChangeNumber(p.on_change), static_cast<long long>(p.block_for),
              static_cast<long long>(kinds[i]), static_cast<long long>(c.cost),
              static_cast<long long>(c.max_wait),
              p.overage == Overage::kReject ? 0LL : static_cast<long long>(core::OverageBound(p)),
              c.usage_id.empty() ? 0LL : static_cast<long long>(c.usage_ttl)});
    if (kinds[i] != WireKind::kRefund) ++decisions;
  }
  merge.nreplies = decisions;
  merge.ids.clear();
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const std::string_view id = HasPermit(kinds[i])  ? checks[i].permit
                                : HasUsage(kinds[i]) ? checks[i].usage_id
                                                     : std::string_view();
    if (id.empty()) continue;
    merge.ids.resize(checks.size());
    merge.ids[i] = id;
  }
}

std::size_t EncodeCoalesced(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                            std::string& out) {
  return AppendArgv(caller_time, groups, out);
}

std::string EncodeGroup(const Script& script, std::span<const StoreCheck> checks,
                        std::span<const WireKind> kinds, Micros now, bool caller_time,
                        CoalesceInfo& merge) {
  GroupData(checks, kinds, now, merge);
  std::string argv;
  const CoalesceInfo* const group = &merge;
  const std::size_t nargs = AppendArgv(caller_time, {&group, 1}, argv);
  std::string out;
  out.reserve(96 + 48 * checks.size() + argv.size());
  AppendHead(script, checks, nargs, out, merge);
  out.append(argv);
  return out;
}

std::string EncodeLean(LeanLane lane, std::span<const StoreCheck> checks, Micros now,
                       bool caller_time, CoalesceInfo& merge) {
  WireKind kinds[kMaxBatchChecks];
  std::fill(kinds, kinds + checks.size(), WireKind::kDecide);
  GroupData(checks, {kinds, checks.size()}, now, merge);
  std::string argv;
  const std::vector<long long>* data = &merge.data;
  const std::size_t nargs = AppendLeanArgv(caller_time, lane, {&data, 1}, argv);
  std::string out;
  out.reserve(96 + 48 * checks.size() + argv.size());
  AppendHead(LeanScript(lane), checks, nargs, out, merge);
  out.append(argv);
  return out;
}

std::size_t EncodeLeanCoalesced(bool caller_time, LeanLane lane,
                                const std::vector<const CoalesceInfo*>& groups, std::string& out) {
  std::vector<const std::vector<long long>*> data;
  data.reserve(groups.size());
  for (const CoalesceInfo* g : groups) data.push_back(&g->data);
  return AppendLeanArgv(caller_time, lane, data, out);
}

std::string EncodeSingle(const Script& script, const StoreCheck& c, Micros now, bool caller_time,
                         CoalesceInfo& merge) {
  const WireKind kind = WireKind::kDecide;
  GroupData({&c, 1}, {&kind, 1}, now, merge);
  const Policy& p = *c.policy;
  const bool bucket = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra;
  const bool init = p.algorithm == Algorithm::kTokenBucket;
  std::string out;
  out.reserve(160);
  AppendHead(script, {&c, 1}, 4 + (bucket ? 1 : 0) + (init ? 1 : 0), out, merge);
  if (caller_time) {
    AppendNumber(out, static_cast<long long>(now));
  } else {
    AppendBulk(out, "");
  }
  AppendNumber(out, static_cast<long long>(p.limit));
  AppendNumber(out, static_cast<long long>(p.window));
  AppendNumber(out, static_cast<long long>(c.cost));
  if (bucket) AppendNumber(out, static_cast<long long>(p.Capacity()));
  if (init) AppendNumber(out, p.initial_tokens ? static_cast<long long>(*p.initial_tokens) : -1LL);
  return out;
}

const Script& LeanScript(LeanLane lane) {
  switch (lane) {
    case LeanLane::kFixedWindow:
      return LeanFixedWindowScript();
    case LeanLane::kBucket:
      return LeanBucketScript();
    case LeanLane::kSlidingLog:
    case LeanLane::kNone:
      break;
  }
  return LeanSlidingLogScript();
}

LeanLane LeanLaneOf(std::span<const StoreCheck> checks, std::span<const WireKind> kinds,
                    bool caller_time) {
  bool fixed = true, bucket = true, log = true;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    fixed = fixed && LeanFixedWindow(checks[i], kinds[i], caller_time);
    bucket = bucket && LeanBucket(checks[i], kinds[i]);
    log = log && LeanSlidingLog(checks[i], kinds[i]);
    // (the lean sliding-log script decides a group's checks before it logs any)
    for (std::size_t j = 0; log && j < i; ++j) log = checks[j].key != checks[i].key;
  }
  return fixed    ? LeanLane::kFixedWindow
         : bucket ? LeanLane::kBucket
         : log    ? LeanLane::kSlidingLog
                  : LeanLane::kNone;
}

ScriptCall EncodeCall(std::span<const StoreCheck> checks, std::span<const WireKind> kinds,
                      Micros now, bool caller_time, CoalesceInfo& merge) {
  ScriptCall out;
  out.lane = LeanLaneOf(checks, kinds, caller_time);
  // (one fixed-window or bucket check alone is the one-check script's: for the fixed
  // window it costs Redis less per call than the lean script's layout, which pays off
  // from two checks on (docs/benchmarks.md); the buckets' one-check scripts also decide a
  // fresh state with one SET ... GET)
  if (((out.lane == LeanLane::kFixedWindow || out.lane == LeanLane::kBucket) &&
       checks.size() > 1) ||
      out.lane == LeanLane::kSlidingLog) {
    out.script = &LeanScript(out.lane);
    out.wire = EncodeLean(out.lane, checks, now, caller_time, merge);
    return out;
  }
  const StoreCheck& c0 = checks[0];
  const Algorithm a0 = c0.policy->algorithm;
  if (checks.size() == 1 && LeanSingle(c0, kinds[0])) {
    out.script = &SingleCheckScript(a0);
    out.wire = EncodeSingle(*out.script, c0, now, caller_time, merge);
    return out;
  }
  const bool alone =
      checks.size() == 1 && (a0 == Algorithm::kSlidingWindowLog ||
                             (a0 == Algorithm::kConcurrency && c0.policy->block_for == 0 &&
                              kinds[0] != WireKind::kForce));
  out.script = alone ? &SingleCheckScript(a0) : &BatchScript();
  out.wire = EncodeGroup(*out.script, checks, kinds, now, caller_time, merge);
  return out;
}

}  // namespace sluice::redis
