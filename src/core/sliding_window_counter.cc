// Sliding window counter: the current epoch-aligned window's count plus the previous
// window's count weighted by the part of the previous window still inside the
// sliding window:
//
//   elapsed  = now - ws                       (ws = start of the current window)
//   estimate = prev * ((W - elapsed) / W) + curr        (IEEE double, in this order)
//   allowed  <=> estimate + max(cost, 1) <= limit + eps
//
// It assumes the previous window's requests were spread evenly; docs/algorithms.md
// gives the error bound against the exact log.
#include <algorithm>
#include <cmath>

#include "core/algorithm_ops.h"
#include "core/algorithms.h"

namespace sluice::core {

Decision SlidingWindowCounter(const Policy& p, const SlidingCounterState& in, bool fresh,
                              Micros now, std::uint64_t cost, SlidingCounterState* out,
                              Micros* expires) {
  const Micros w = p.window;
  Micros ws = FloorTo(now, w);
  std::uint64_t curr = 0;
  std::uint64_t prev = 0;
  if (!fresh) {
    if (in.window_start >= ws) {
      ws = in.window_start;
      curr = in.curr;
      prev = in.prev;
    } else if (in.window_start == ws - w) {
      prev = in.curr;
    }
  }
  const Micros t = std::max(now, ws);
  const Micros elapsed = t - ws;
  const double limit = static_cast<double>(p.limit);
  const double weight = static_cast<double>(w - elapsed) / static_cast<double>(w);
  double estimate = static_cast<double>(prev) * weight + static_cast<double>(curr);
  const std::uint64_t need = std::max<std::uint64_t>(cost, 1);

  Decision d;
  d.limit = p.limit;
  d.allowed = estimate + static_cast<double>(need) <= limit + kEpsilon;
  if (d.allowed) {
    curr += cost;
    estimate += static_cast<double>(cost);
  } else if (curr + need <= p.limit) {
    // Wait until enough of the previous window has slid out:
    // prev * (W - e) / W <= limit - curr - need.
    const double room = static_cast<double>(p.limit - curr - need);
    const double e =
        static_cast<double>(w) - room * static_cast<double>(w) / static_cast<double>(prev);
    d.retry_after = std::max<Micros>(1, ws + static_cast<Micros>(std::ceil(e)) - t);
  } else {
    // Only in the next window, where this window's count becomes the weighted one.
    const double room = static_cast<double>(p.limit - need);
    const double e = std::max(
        0.0, static_cast<double>(w) - room * static_cast<double>(w) / static_cast<double>(curr));
    d.retry_after = std::max<Micros>(1, ws + w + static_cast<Micros>(std::ceil(e)) - t);
  }
  const double left = std::floor(limit - estimate + kEpsilon);
  d.remaining = left > 0 ? static_cast<std::uint64_t>(left) : 0;
  if (curr > 0) {
    d.reset_after = ws + 2 * w - t;
  } else if (prev > 0) {
    d.reset_after = ws + w - t;
  }
  out->window_start = ws;
  out->curr = curr;
  out->prev = prev;
  *expires = curr > 0 ? ws + 2 * w : ws + w;
  return d;
}

void SlidingWindowCounterRefund(const Policy& p, const SlidingCounterState& in, Micros now,
                                std::uint64_t cost, SlidingCounterState* out, Micros* expires) {
  const Micros w = p.window;
  *out = in;
  if (in.window_start >= FloorTo(now, w)) out->curr = in.curr - std::min(in.curr, cost);
  *expires = out->curr > 0 ? out->window_start + 2 * w : out->window_start + w;
}

// Penalties (core/penalties.cc has the shared rules).
Decision SlidingWindowCounterPenalize(const Policy& p, const SlidingCounterState& in, bool fresh,
                                      Micros now, std::uint64_t cost, SlidingCounterState* out,
                                      Micros* expires) {
  SlidingCounterState s;
  Micros e;
  (void)SlidingWindowCounter(p, in, fresh, now, 0, &s, &e);
  const std::uint64_t was = s.curr;
  s.curr = std::max(s.curr, std::min(s.curr + cost, 2 * p.limit));
  Decision d = SlidingWindowCounter(p, s, /*fresh=*/false, now, 0, out, expires);
  d.charged = s.curr - was;
  return d;
}

// Overage: bounded on the estimate (the weighted previous window included), so that
// the key's usage as a decision sees it never exceeds `bound`: the current window's
// count grows by min(cost, floor(bound - estimate)), never below what it was.
Decision SlidingWindowCounterCharge(const Policy& p, const SlidingCounterState& in, bool fresh,
                                    Micros now, std::uint64_t cost, std::uint64_t bound,
                                    SlidingCounterState* out, Micros* expires) {
  SlidingCounterState s;
  Micros e;
  (void)SlidingWindowCounter(p, in, fresh, now, 0, &s, &e);
  const Micros w = p.window;
  const Micros elapsed = std::max(now, s.window_start) - s.window_start;
  const double weight = static_cast<double>(w - elapsed) / static_cast<double>(w);
  const double estimate = static_cast<double>(s.prev) * weight + static_cast<double>(s.curr);
  const double room = std::floor(static_cast<double>(bound) - estimate + kEpsilon);
  const std::uint64_t add =
      room > 0 ? std::min(cost, static_cast<std::uint64_t>(room)) : std::uint64_t{0};
  s.curr += add;
  Decision d = SlidingWindowCounter(p, s, /*fresh=*/false, now, 0, out, expires);
  d.charged = add;
  return d;
}

// Carry-over (Policy::on_change, kProportional; core/carry.cc has the shared rules).
bool CarrySlidingWindowCounter(const Policy& p, const WrittenUnder& w, SlidingCounterState* s) {
  if (w.window != static_cast<double>(p.window)) return false;
  s->curr = CarryScaleCount(s->curr, p, w);
  s->prev = CarryScaleCount(s->prev, p, w);
  return true;
}

// This algorithm's entry of the operations table (core/algorithm_ops.h).
namespace {

Decision OpsDecide(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires, Micros /*max_wait*/) {
  return SlidingWindowCounter(p, in.counter, fresh, now, cost, &out->counter, expires);
}
void OpsRefund(const Policy& p, const WordState& in, Micros now, std::uint64_t cost, WordState* out,
               Micros* expires) {
  SlidingWindowCounterRefund(p, in.counter, now, cost, &out->counter, expires);
}
Decision OpsPenalize(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires) {
  return SlidingWindowCounterPenalize(p, in.counter, fresh, now, cost, &out->counter, expires);
}
bool OpsCarry(const Policy& p, const WrittenUnder& w, Micros /*now*/, WordState* s) {
  return CarrySlidingWindowCounter(p, w, &s->counter);
}

Decision OpsCharge(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires) {
  return SlidingWindowCounterCharge(p, in.counter, fresh, now, cost, OverageBound(p), &out->counter,
                                    expires);
}

}  // namespace

const WordOps kSlidingWindowCounterOps = {OpsDecide, OpsRefund, OpsPenalize, OpsCarry, OpsCharge};

}  // namespace sluice::core
