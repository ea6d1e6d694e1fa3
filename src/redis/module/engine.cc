// The module's decisions (engine.h): lua/runner.lua's group semantics on the C++
// algorithms (core/algorithm_ops.h), with the scripts' state layouts (state.h).
#include "redis/module/engine.h"

#include <algorithm>
#include <charconv>

#include "core/algorithm_ops.h"
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

// A penalty's reply: as a decision's, or, when it took units (Decision::charged), the
// five numbers of the runner's emit5 (runner.lua): the flag + 4, then the units.
void AppendPenalty(const Decision& d, std::uint64_t cap, std::vector<long long>* reply) {
  if (d.charged == 0) return AppendDecision(d, cap, reply);
  reply->push_back((d.allowed ? 2 : 0) + 4);
  reply->push_back(static_cast<long long>(d.remaining));
  reply->push_back(d.reset_after);
  reply->push_back(d.retry_after);
  reply->push_back(static_cast<long long>(d.charged));
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
// block's end in us, read as the script reads it (tonumber).
void ApplyBlock(const Policy& p, const ModuleCheck& c, std::size_t check, const StoredValue& b,
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
    if (d->allowed || c.cost == 0) return;
    left = p.block_for;
    ModuleWrite w;
    w.check = check;
    w.block = true;
    const auto end = std::to_chars(w.value.data, w.value.data + sizeof(w.value.data), now + left);
    w.value.size = static_cast<std::uint8_t>(end.ptr - w.value.data);
    w.ttl_ms = TtlMs(now + left, now, pad_ms);
    writes->push_back(w);
  }
  core::ApplyBlock(d, left);
}

void Emit(const Policy& p, const core::WordState& s, Micros expires, Layout layout,
          std::size_t check, Micros now, long long pad_ms, std::vector<ModuleWrite>* writes,
          const ReadState* read = nullptr) {
  const bool keep = read != nullptr && read->live && read->expires == expires;
  writes->push_back({check, Encode(p, s, expires, layout), TtlMs(expires, now, pad_ms), keep});
}

}  // namespace

void DecideGroup(const ModuleRequest& r, const ModuleGroup& g, Micros now,
                 std::span<const StoredValue> values, std::span<const StoredValue> blocks,
                 LogCommands& logs, std::vector<ModuleWrite>* writes,
                 std::vector<long long>* reply) {
  // (per thread, made once: a group of one check then initialises one entry, not 16)
  thread_local ReadState read[kMaxBatchChecks];
  thread_local bool allowed[kMaxBatchChecks];
  thread_local core::WordState next[kMaxBatchChecks];
  thread_local Micros expires[kMaxBatchChecks];
  thread_local SlidingLogState log_state[kMaxBatchChecks];
  bool all = true, consumes = false;
  const std::size_t n = g.end - g.begin;
  for (std::size_t i = 0; i < n; ++i) {
    allowed[i] = false;
    const ModuleCheck& c = r.checks[g.begin + i];
    const Policy& p = r.policies[c.policy];
    if (p.algorithm == Algorithm::kSlidingWindowLog) {  // two keys, its own state
      Decision d;
      const LogCheck lc{p, c, g.begin + i, now, r.pad_ms, logs, log_state[i], writes};
      if (!SlidingLogFirst(lc, values[i], &d)) continue;  // a refund: no reply
      if (p.block_for > 0) ApplyBlock(p, c, g.begin + i, blocks[i], now, r.pad_ms, &d, writes);
      if (c.op == 3) {
        AppendPenalty(d, p.Capacity(), reply);
        continue;
      }
      AppendDecision(d, p.Capacity(), reply);
      all = all && d.allowed;
      consumes = consumes || c.cost > 0;
      continue;
    }
    const core::WordOps& ops = *core::WordOpsOf(p.algorithm);
    const std::size_t at = g.begin + i;
    ReadState& s = read[i];
    s = Read(p, values[i], now);
    // (a refund reads a recorded state only under its own parameters: `usable`)
    if (c.op != 2) CarryOver(p, now, &s);
    // Refunds use a recorded state only when it records p's parameters; a penalty reads
    // the state as the decision does (FORCE[id] normalises through DECIDE) and writes
    // the layout a decision writes.
    const bool usable = s.live && (s.layout != Layout::kRecorded || s.same_params);
    if (c.op == 2) {  // refund: no reply
      if (!usable) continue;
      ops.refund(p, s.word, now, c.cost, &next[i], &expires[i]);
      const StateBytes value = Encode(p, next[i], expires[i], RefundLayout(s));
      if (value.view() != values[i].bytes) {
        writes->push_back({at, value, TtlMs(expires[i], now, r.pad_ms)});
      }
      continue;
    }
    if (c.op == 3) {  // penalty: applied now, answered with a peek at the state after it
      Decision d = ops.penalize(p, s.word, !s.live, now, c.cost, &next[i], &expires[i]);
      Emit(p, next[i], expires[i], DecisionLayout(p, s, now, r.pad_ms, /*forced=*/true), at, now,
           r.pad_ms, writes);
      if (p.block_for > 0) ApplyBlock(p, c, at, blocks[i], now, r.pad_ms, &d, writes);
      AppendPenalty(d, p.Capacity(), reply);
      continue;
    }
    Decision d = ops.decide(p, s.word, !s.live, now, c.cost, &next[i], &expires[i],
                            c.op == 1 ? c.max_wait : 0);
    allowed[i] = d.allowed;  // (the algorithm's own answer: a fixed window's counter below)
    if (p.block_for > 0) ApplyBlock(p, c, at, blocks[i], now, r.pad_ms, &d, writes);
    AppendDecision(d, p.Capacity(), reply);
    all = all && d.allowed;
    consumes = consumes || c.cost > 0;
  }
  if (g.op != StoreOp::kDecide) return;
  for (std::size_t i = 0; i < n; ++i) {
    const ModuleCheck& c = r.checks[g.begin + i];
    const Policy& p = r.policies[c.policy];
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      SlidingLogLast({p, c, g.begin + i, now, r.pad_ms, logs, log_state[i], writes},
                     all && consumes);
      continue;
    }
    if (c.cost == 0) continue;
    if (all && consumes) {
      Emit(p, next[i], expires[i], DecisionLayout(p, read[i], now, r.pad_ms), g.begin + i, now,
           r.pad_ms, writes, &read[i]);
    } else if (p.algorithm == Algorithm::kFixedWindow && allowed[i] &&
               StartsCounter(p, read[i], values[i], now, r.pad_ms)) {
      // Not committed: the script's INCRBY has already started this window's counter
      // (fixed_window.lua, SET then the undo): the same counter, at 0.
      core::WordState zero;
      zero.fixed = {core::FloorTo(now, p.window), 0};
      Emit(p, zero, zero.fixed.window_start + p.window, Layout::kCounter, g.begin + i, now,
           r.pad_ms, writes);
    } else if (p.algorithm == Algorithm::kTokenBucket && !read[i].live &&
               core::TokenBucketStartsOnDenial(p)) {
      // Not committed: a new bucket with initial tokens below its capacity starts anyway
      // (core/token_bucket.cc; token_bucket.lua's `start`).
      core::WordState start;
      Micros start_expires = 0;
      core::TokenBucketStart(p, now, &start.bucket, &start_expires);
      Emit(p, start, start_expires,
           p.on_change != OnChange::kAsIs ? Layout::kRecorded : Layout::kPacked, g.begin + i, now,
           r.pad_ms, writes);
    }
  }
}

}  // namespace sluice::redis_module
