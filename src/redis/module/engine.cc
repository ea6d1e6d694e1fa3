// The module's decisions (engine.h): lua/runner.lua's group semantics on the C++
// algorithms (core/algorithm_ops.h), with the scripts' state layouts (state.h).
#include "redis/module/engine.h"

#include <algorithm>
#include <charconv>

#include "core/algorithm_ops.h"
#include "redis/module/permits.h"
#include "redis/module/sliding_log.h"
#include "redis/module/state.h"

namespace sluice::redis_module {

long long TtlMs(Micros expires, Micros now, long long pad_ms) {
  const Micros left = expires - now;
  const long long ms = left <= 0 ? 0 : (left + 999) / 1000;
  return std::max<long long>(ms, 1) + pad_ms;
}

namespace {

// The scripts' reply for one decision (redis/reply.cc, DecodeDecisions): one odd
// integer for an allowed decision with nothing to wait when it is below 2^53, else four.
void AppendDecision(const Decision& d, std::uint64_t cap, std::vector<long long>* reply) {
  if (d.allowed && d.wait == 0 && d.retry_after == 0 && d.remaining <= cap && d.reset_after >= 0) {
    const unsigned __int128 v =
        (static_cast<unsigned __int128>(d.reset_after) * (cap + 1) + d.remaining) * 2 + 1;
    if (v < (static_cast<unsigned __int128>(1) << 53)) {
      reply->push_back(static_cast<long long>(v));
      return;
    }
  }
  reply->push_back(d.allowed ? 2 : 0);
  reply->push_back(static_cast<long long>(d.remaining));
  reply->push_back(d.reset_after);
  reply->push_back(d.allowed && d.wait > 0 ? -d.wait : d.retry_after);
}

// The five numbers of the runner's emit5 (runner.lua) at `at`: the flag + 4, then the
// units taken (Decision::charged).
void PutFive(const Decision& d, long long* at) {
  at[0] = (d.allowed ? 2 : 0) + 4;
  at[1] = static_cast<long long>(d.remaining);
  at[2] = d.reset_after;
  at[3] = d.retry_after;
  at[4] = static_cast<long long>(d.charged);
}

// A penalty's reply: as a decision's, or, when it took units, five numbers.
void AppendPenalty(const Decision& d, std::uint64_t cap, std::vector<long long>* reply) {
  if (d.charged == 0) return AppendDecision(d, cap, reply);
  reply->resize(reply->size() + 5);
  PutFive(d, reply->data() + reply->size() - 5);
}

// True when check `c` of `p` is charged if its group is denied (Policy::overage).
bool Charges(const Policy& p, const ModuleCheck& c) {
  return p.overage != Overage::kReject && c.cost > 0 && (c.op == 0 || c.op == 1 || c.op == 7);
}

// The layout a committed decision writes: under on_change the recorded one; else the
// fixed window's counter unless it is a live state in a packed layout (kept to its
// window's end: a rolling upgrade), else the plain one. A penalty (`forced`) writes the
// plain layouts whatever the policy's on_change (the scripts' FORCE).
Layout DecisionLayout(const Policy& p, const ReadState& s, Micros now, long long pad_ms,
                      bool forced = false) {
  if (!forced && p.on_change != OnChange::kAsIs) return Layout::kRecorded;
  if (p.algorithm == Algorithm::kGcra) return Layout::kNumber;
  if (p.algorithm != Algorithm::kFixedWindow) return Layout::kPacked;
  const bool packed = (s.layout == Layout::kPacked || s.layout == Layout::kRecorded) && s.live &&
                      s.word.fixed.window_start >= core::FloorTo(now, p.window);
  return FixedWindowLean(p, pad_ms) && !packed ? Layout::kCounter : Layout::kPacked;
}

// True when a fixed window's decision that is not committed still leaves this window's
// counter at 0 in the script (its INCRBY met no counter of this window, or none at all).
bool StartsCounter(const Policy& p, const ReadState& s, const StoredValue& v, Micros now,
                   long long pad_ms) {
  if (!FixedWindowLean(p, pad_ms) || (v.present && s.layout != Layout::kCounter)) return false;
  return !(s.live && s.word.fixed.window_start >= core::FloorTo(now, p.window));
}

// A refund writes the layout it found (word_state.lua's pack_word; GCRA's older
// '<Bdd' becomes its number).
Layout RefundLayout(const ReadState& s) {
  return s.layout == Layout::kNone ? Layout::kPacked : s.layout;
}

// Carry-over (Policy::on_change): a live state recorded under other parameters is, for
// a policy with on_change, fresh (reset, or across a window change) or converted
// (proportional; a token bucket new again under p is fresh), as the in-process store's
// NormaliseWord and the scripts' decision bodies read it. A policy without on_change
// reads it as it is.
void CarryOver(const Policy& p, Micros now, ReadState* s) {
  if (p.on_change == OnChange::kAsIs || s->layout != Layout::kRecorded || !s->live ||
      s->same_params) {
    return;
  }
  const core::WordOps& ops = *core::WordOpsOf(p.algorithm);
  const bool fresh =
      p.on_change == OnChange::kReset || !ops.carry(p, s->under, now, &s->word) ||
      (p.algorithm == Algorithm::kTokenBucket && core::TokenBucketIsNew(p, s->word.bucket, now));
  if (fresh) s->live = false;
}

// penalties.lua's apply_block for check `c` (its policy has a block_for) after its
// decision `d`: a blocked key is denied (core::ApplyBlock); a denial by the policy (not
// a peek), or a penalty (cost >= 1, so never a peek) that left the key over its limit,
// starts a block, written at once whatever its group does. The block key `b` holds the
// block's end in us, read as the script reads it (tonumber). Returns the block's time
// left when `d` is blocked, else 0.
Micros ApplyBlock(const Policy& p, const ModuleCheck& c, std::size_t check, const StoredValue& b,
                  Micros now, long long pad_ms, Decision* d, std::vector<ModuleWrite>* writes) {
  // A block's end more than 2^53 us away (no sluice writes one) blocks for that long:
  // the largest time left that converts to an integer exactly.
  constexpr double kMaxLeft = 9007199254740992.0;
  Micros left = 0;
  double until = 0;
  if (b.present && LuaNumber(b.bytes, &until) && until > static_cast<double>(now)) {
    left = static_cast<Micros>(std::min(until - static_cast<double>(now), kMaxLeft));
  }
  if (left == 0) {
    if (d->allowed || c.cost == 0) return 0;
    left = p.block_for;
    ModuleWrite w;
    w.check = check;
    w.to = WriteTo::kBlock;
    const auto end = std::to_chars(w.value.data, w.value.data + sizeof(w.value.data), now + left);
    w.value.size = static_cast<std::uint8_t>(end.ptr - w.value.data);
    w.ttl_ms = TtlMs(now + left, now, pad_ms);
    writes->push_back(w);
  }
  core::ApplyBlock(d, left);
  return left;
}

void Emit(const Policy& p, const core::WordState& s, Micros expires, Layout layout,
          std::size_t check, Micros now, long long pad_ms, std::vector<ModuleWrite>* writes,
          const ReadState* read = nullptr) {
  const bool keep = read != nullptr && read->live && read->expires == expires;
  writes->push_back({check, Encode(p, s, expires, layout), TtlMs(expires, now, pad_ms), keep});
}

// A group's decisions, kept until its outcome (one per check, in order).
struct Pending {
  ReadState read[kMaxBatchChecks];
  bool allowed[kMaxBatchChecks];  // the algorithm's own answer (a fixed window's counter)
  core::WordState next[kMaxBatchChecks];
  Micros expires[kMaxBatchChecks];
  Micros blocked[kMaxBatchChecks];       // the block's time left when it blocked the check
  SlidingLogState log[kMaxBatchChecks];  // a sliding log's (sliding_log.h)
};

// A group not committed: what the script's decision changed in place stays (a fixed
// window's counter started at 0; a token bucket with initial tokens below its capacity
// starts anyway), then the checks that charge (Policy::overage) take their cost per
// their rule and answer with a peek after it, denied, blocked if their key is, as the
// runner's `charge`.
void Unwind(const ModuleRequest& r, std::span<const ModuleCheck> checks, std::size_t first,
            Micros now, std::span<const StoredValue> values, SortedSets& sets, Pending& pend,
            std::vector<ModuleWrite>* writes, Decision* out) {
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ModuleCheck& c = checks[i];
    const Policy& p = r.policies[c.policy];
    const ReadState& s = pend.read[i];
    if (c.cost == 0) continue;
    if (p.algorithm == Algorithm::kFixedWindow && pend.allowed[i] &&
        StartsCounter(p, s, values[i], now, r.pad_ms)) {
      // The script's INCRBY has already started this window's counter (fixed_window.lua,
      // SET then the undo): the same counter, at 0.
      core::WordState zero;
      zero.fixed = {core::FloorTo(now, p.window), 0};
      Emit(p, zero, zero.fixed.window_start + p.window, Layout::kCounter, first + i, now, r.pad_ms,
           writes);
    } else if (p.algorithm == Algorithm::kTokenBucket && !s.live &&
               core::TokenBucketStartsOnDenial(p)) {
      // (core/token_bucket.cc; token_bucket.lua's `start`)
      core::WordState start;
      Micros start_expires = 0;
      core::TokenBucketStart(p, now, &start.bucket, &start_expires);
      Emit(p, start, start_expires,
           p.on_change != OnChange::kAsIs ? Layout::kRecorded : Layout::kPacked, first + i, now,
           r.pad_ms, writes);
    }
  }
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ModuleCheck& c = checks[i];
    const Policy& p = r.policies[c.policy];
    if (!Charges(p, c)) continue;
    Decision& d = out[i];
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      d = SlidingLogCharge({p, c, first + i, now, r.pad_ms, sets, pend.log[i], writes});
    } else {
      const ReadState& s = pend.read[i];
      d = core::WordOpsOf(p.algorithm)
              ->charge(p, s.word, !s.live, now, c.cost, &pend.next[i], &pend.expires[i]);
      // (the plain layouts, as FORCE writes them; a counter only while the debt fits its
      // 32 bits)
      Layout layout = DecisionLayout(p, s, now, r.pad_ms, /*forced=*/true);
      if (layout == Layout::kCounter && pend.next[i].fixed.count >= (std::uint64_t{1} << 32)) {
        layout = Layout::kPacked;
      }
      Emit(p, pend.next[i], pend.expires[i], layout, first + i, now, r.pad_ms, writes);
    }
    d.allowed = false;
    if (pend.blocked[i] > 0) core::ApplyBlock(&d, pend.blocked[i]);
  }
}

// What a check's first pass did, for its group's outcome.
enum class Pass : std::uint8_t {
  kNone,     // a refund: applied, no decision
  kApplied,  // a penalty, a permit's release or extend: decided and applied on its own
  kDecided,  // a decision: committed, or not, with its group
};

// The first pass of check `c` (`at` in the request, `i` in its group) of a word
// algorithm (core/algorithm_ops.h) on the value its state key holds.
Pass FirstWord(const ModuleRequest& r, const ModuleCheck& c, std::size_t at, std::size_t i,
               Micros now, const StoredValue& value, const StoredValue& block, Pending& pend,
               std::vector<ModuleWrite>* writes, Decision* out) {
  const Policy& p = r.policies[c.policy];
  const core::WordOps& ops = *core::WordOpsOf(p.algorithm);
  ReadState& s = pend.read[i];
  s = Read(p, value, now);
  // (a refund reads a recorded state only under its own parameters: `usable`)
  if (c.op != 2) CarryOver(p, now, &s);
  // Refunds use a recorded state only when it records p's parameters; a penalty reads
  // the state as the decision does (FORCE[id] normalises through DECIDE) and writes the
  // layout a decision writes.
  const bool usable = s.live && (s.layout != Layout::kRecorded || s.same_params);
  if (c.op == 2) {
    if (!usable) return Pass::kNone;
    ops.refund(p, s.word, now, c.cost, &pend.next[i], &pend.expires[i]);
    const StateBytes bytes = Encode(p, pend.next[i], pend.expires[i], RefundLayout(s));
    if (bytes.view() != value.bytes) {
      writes->push_back({at, bytes, TtlMs(pend.expires[i], now, r.pad_ms)});
    }
    return Pass::kNone;
  }
  if (c.op == 3) {  // penalty: applied now, answered with a peek at the state after it
    *out = ops.penalize(p, s.word, !s.live, now, c.cost, &pend.next[i], &pend.expires[i]);
    Emit(p, pend.next[i], pend.expires[i], DecisionLayout(p, s, now, r.pad_ms, /*forced=*/true), at,
         now, r.pad_ms, writes);
    if (p.block_for > 0) ApplyBlock(p, c, at, block, now, r.pad_ms, out, writes);
    return Pass::kApplied;
  }
  // (a cost beyond the capacity, a usage report, never fits: each algorithm denies it)
  *out = ops.decide(p, s.word, !s.live, now, c.cost, &pend.next[i], &pend.expires[i],
                    c.op == 1 ? c.max_wait : 0);
  pend.allowed[i] = out->allowed;
  if (p.block_for > 0) pend.blocked[i] = ApplyBlock(p, c, at, block, now, r.pad_ms, out, writes);
  return Pass::kDecided;
}

// The first pass of a sliding log's check (two keys, its own state: sliding_log.h).
Pass FirstLog(const ModuleRequest& r, const ModuleCheck& c, std::size_t at, std::size_t i,
              Micros now, const StoredValue& value, const StoredValue& block, SortedSets& sets,
              Pending& pend, std::vector<ModuleWrite>* writes, Decision* out) {
  const Policy& p = r.policies[c.policy];
  const LogCheck lc{p, c, at, now, r.pad_ms, sets, pend.log[i], writes};
  if (!SlidingLogFirst(lc, value, out)) return Pass::kNone;  // a refund
  if (p.block_for > 0) pend.blocked[i] = ApplyBlock(p, c, at, block, now, r.pad_ms, out, writes);
  return c.op == 3 ? Pass::kApplied : Pass::kDecided;
}

// Decides `checks` (one group, checks `first`... of the request: the writes name them)
// on `values` and `blocks` (sorted sets through `sets`: sliding logs, permit sets) into
// `out` (a refund's left as it is) and the writes; true when the group committed (a
// decision group whose checks all allowed, one consuming).
bool DecideChecks(const ModuleRequest& r, std::span<const ModuleCheck> checks, std::size_t first,
                  Micros now, std::span<const StoredValue> values,
                  std::span<const StoredValue> blocks, SortedSets& sets,
                  std::vector<ModuleWrite>* writes, Decision* out) {
  // (per thread, made once: a group of one check then initialises one entry, not 16)
  thread_local Pending pend;
  bool all = true, consumes = false, decides = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    pend.allowed[i] = false;
    pend.blocked[i] = 0;
    const ModuleCheck& c = checks[i];
    const Policy& p = r.policies[c.policy];
    Pass pass;
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      pass = FirstLog(r, c, first + i, i, now, values[i], blocks[i], sets, pend, writes, &out[i]);
    } else if (p.algorithm == Algorithm::kConcurrency) {
      if (c.op == 2) continue;  // (a refund: nothing, as REFUND[5])
      out[i] = PermitDecide({p, c, now, r.pad_ms, sets});
      pass = c.op == 4 ? Pass::kDecided : Pass::kApplied;  // (a release or extend: solo)
    } else {
      pass = FirstWord(r, c, first + i, i, now, values[i], blocks[i], pend, writes, &out[i]);
    }
    if (pass != Pass::kDecided) continue;
    all = all && out[i].allowed;
    consumes = consumes || c.cost > 0;
    decides = true;
  }
  if (!decides) return false;
  const bool commit = all && consumes;
  // A sliding log is logged, or keeps what its decision normalised (SlidingLogLast).
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Policy& p = r.policies[checks[i].policy];
    if (p.algorithm != Algorithm::kSlidingWindowLog) continue;
    SlidingLogLast({p, checks[i], first + i, now, r.pad_ms, sets, pend.log[i], writes}, commit);
  }
  if (!commit) {
    Unwind(r, checks, first, now, values, sets, pend, writes, out);
    return false;
  }
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ModuleCheck& c = checks[i];
    const Policy& p = r.policies[c.policy];
    if (c.cost == 0 || p.algorithm == Algorithm::kSlidingWindowLog) continue;
    if (p.algorithm == Algorithm::kConcurrency) {
      if (c.op == 4) PermitCommit({p, c, now, r.pad_ms, sets}, out[i]);
      continue;
    }
    Emit(p, pend.next[i], pend.expires[i], DecisionLayout(p, pend.read[i], now, r.pad_ms),
         first + i, now, r.pad_ms, writes, &pend.read[i]);
  }
  return true;
}

// Writes check `i`'s usage record: "<taken> <expires>", "s" in front once settled, with
// a TTL to its expiry (runner.lua's record_usage).
void WriteRecord(std::size_t i, const UsageRecord& u, Micros now, long long pad_ms,
                 std::vector<ModuleWrite>* writes) {
  ModuleWrite w;
  w.check = i;
  w.to = WriteTo::kRecord;
  char* p = w.value.data;
  char* const end = p + sizeof(w.value.data);
  if (u.settled) *p++ = 's';
  p = std::to_chars(p, end, u.taken).ptr;
  *p++ = ' ';
  p = std::to_chars(p, end, u.expires).ptr;
  w.value.size = static_cast<std::uint8_t>(p - w.value.data);
  w.ttl_ms = TtlMs(u.expires, now, pad_ms);
  writes->push_back(w);
}

}  // namespace

void DecideGroup(const ModuleRequest& r, const ModuleGroup& g, Micros now,
                 std::span<const StoredValue> values, std::span<const StoredValue> blocks,
                 SortedSets& sets, std::vector<ModuleWrite>* writes,
                 std::vector<long long>* reply) {
  const std::span<const ModuleCheck> checks(r.checks.data() + g.begin, g.end - g.begin);
  // (per thread, made once, as DecideChecks' own: each entry a check reads is set)
  thread_local Decision out[kMaxBatchChecks];
  const bool committed = DecideChecks(r, checks, g.begin, now, values, blocks, sets, writes, out);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const ModuleCheck& c = checks[i];
    const Policy& p = r.policies[c.policy];
    if (c.op == 2) continue;  // a refund has no reply
    if (c.op == 3) {
      AppendPenalty(out[i], p.Capacity(), reply);
    } else if (Charges(p, c)) {  // five numbers, whether or not it charged
      reply->resize(reply->size() + 5);
      PutFive(out[i], reply->data() + reply->size() - 5);
    } else {
      AppendDecision(out[i], p.Capacity(), reply);
    }
    if (c.record_key >= 0) {
      // What it took: its cost when the group committed, else what its overage charged.
      const std::uint64_t taken = committed ? c.cost : out[i].charged;
      WriteRecord(g.begin + i, {false, taken, now + c.usage_ttl}, now, r.pad_ms, writes);
    }
  }
}

bool ReadUsageRecord(const StoredValue& v, Micros now, UsageRecord* out) {
  if (!v.present) return false;
  const char* p = v.bytes.data();
  const char* const end = p + v.bytes.size();
  UsageRecord u;
  u.settled = p != end && *p == 's';
  if (u.settled) ++p;
  // ('^(s?)(%d+) (%-?%d+)$': digits only, then a space, then an optional minus)
  if (p == end || *p < '0' || *p > '9') return false;
  auto t = std::from_chars(p, end, u.taken);
  if (t.ec != std::errc() || t.ptr == end || *t.ptr != ' ') return false;
  p = t.ptr + 1;
  if (p == end || *p == '+') return false;
  auto e = std::from_chars(p, end, u.expires);
  if (e.ec != std::errc() || e.ptr != end || u.expires <= now) return false;
  *out = u;
  return true;
}

void SettleCheck(const ModuleRequest& r, std::size_t i, Micros now, const UsageRecord& record,
                 const StoredValue& value, const StoredValue& block, SortedSets& sets,
                 std::vector<ModuleWrite>* writes, std::vector<long long>* reply) {
  const ModuleCheck& c = r.checks[i];
  const Policy& p = r.policies[c.policy];
  const bool applied = !record.settled;
  // The same check, deciding (op 7: charged per the overage) without a record.
  ModuleCheck one = c;
  one.op = 7;
  one.record_key = -1;
  one.usage_ttl = 0;
  Decision d;
  if (applied && c.cost > record.taken &&
      (c.cost - record.taken <= p.Capacity() || p.overage != Overage::kReject)) {
    one.cost = c.cost - record.taken;  // the rest, decided as one check
    DecideChecks(r, {&one, 1}, i, now, {&value, 1}, {&block, 1}, sets, writes, &d);
  } else {
    StoredValue state = value;
    StateBytes refunded;
    if (applied && c.cost < record.taken) {
      ModuleCheck refund = one;
      refund.op = 2;
      refund.cost = record.taken - c.cost;
      const std::size_t before = writes->size();
      DecideChecks(r, {&refund, 1}, i, now, {&value, 1}, {&block, 1}, sets, writes, &d);
      // (the peek reads what the refund wrote, as the script's next GET does)
      if (writes->size() > before) {
        refunded = writes->back().value;
        state = {true, refunded.view()};
      }
    }
    one.cost = 0;
    DecideChecks(r, {&one, 1}, i, now, {&state, 1}, {&block, 1}, sets, writes, &d);
    d.charged = 0;
  }
  d.allowed = applied;
  if (applied) WriteRecord(i, {true, record.taken, record.expires}, now, r.pad_ms, writes);
  reply->resize(reply->size() + 5);
  PutFive(d, reply->data() + reply->size() - 5);
}

}  // namespace sluice::redis_module
