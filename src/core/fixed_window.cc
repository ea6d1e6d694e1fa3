// Fixed window: one counter per epoch-aligned window of length W.
//
//   ws = floor(now / W) * W, but never before the stored window (time going back)
//   count = stored count if the stored window is ws, else 0
//   allowed  <=> count + max(cost, 1) <= limit
// At a window boundary up to 2 x limit can pass within a short time: the article's
// "100 at 12:00:59 and 100 at 12:01:00". That is this algorithm's documented behaviour.
#include <algorithm>

#include "core/algorithm_ops.h"
#include "core/algorithms.h"

namespace sluice::core {

Decision FixedWindow(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                     std::uint64_t cost, FixedWindowState* out, Micros* expires) {
  const Micros w = p.window;
  Micros ws = FloorTo(now, w);
  std::uint64_t count = 0;
  if (!fresh) {
    if (in.window_start >= ws) {
      ws = in.window_start;  // same window, or the clock went back: keep the stored one
      count = in.count;
    }
  }
  const Micros t = std::max(now, ws);
  const std::uint64_t need = std::max<std::uint64_t>(cost, 1);

  Decision d;
  d.limit = p.limit;
  d.allowed = count + need <= p.limit;
  if (d.allowed) {
    count += cost;
  } else {
    d.retry_after = ws + w - t;
  }
  // (count may exceed the limit after a penalty or a limit decrease)
  d.remaining = count < p.limit ? p.limit - count : 0;
  d.reset_after = count > 0 ? ws + w - t : 0;
  out->window_start = ws;
  out->count = count;
  *expires = ws + w;
  return d;
}

void FixedWindowRefund(const Policy& p, const FixedWindowState& in, Micros now, std::uint64_t cost,
                       FixedWindowState* out, Micros* expires) {
  *out = in;
  *expires = in.window_start + p.window;
  // Same rule as a decision: the stored window is the current one unless a later
  // window has begun (time going back keeps the stored one).
  if (in.window_start < FloorTo(now, p.window)) return;
  out->count = in.count - std::min(in.count, cost);
}

// Penalties and overage (core/penalties.cc has the shared rules).
Decision FixedWindowCharge(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                           std::uint64_t cost, std::uint64_t bound, FixedWindowState* out,
                           Micros* expires) {
  FixedWindowState s;
  Micros e;
  (void)FixedWindow(p, in, fresh, now, 0, &s, &e);
  const std::uint64_t was = s.count;
  s.count = std::max(s.count, std::min(s.count + cost, bound));
  Decision d = FixedWindow(p, s, /*fresh=*/false, now, 0, out, expires);
  d.charged = s.count - was;
  return d;
}

Decision FixedWindowPenalize(const Policy& p, const FixedWindowState& in, bool fresh, Micros now,
                             std::uint64_t cost, FixedWindowState* out, Micros* expires) {
  return FixedWindowCharge(p, in, fresh, now, cost, PenaltyBound(p), out, expires);
}

// Carry-over (Policy::on_change, kProportional; core/carry.cc has the shared rules).
bool CarryFixedWindow(const Policy& p, const WrittenUnder& w, FixedWindowState* s) {
  if (w.window != static_cast<double>(p.window)) return false;
  s->count = CarryScaleCount(s->count, p, w);
  return true;
}

// This algorithm's entry of the operations table (core/algorithm_ops.h).
namespace {

Decision OpsDecide(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires, Micros /*max_wait*/) {
  return FixedWindow(p, in.fixed, fresh, now, cost, &out->fixed, expires);
}
void OpsRefund(const Policy& p, const WordState& in, Micros now, std::uint64_t cost, WordState* out,
               Micros* expires) {
  FixedWindowRefund(p, in.fixed, now, cost, &out->fixed, expires);
}
Decision OpsPenalize(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires) {
  return FixedWindowPenalize(p, in.fixed, fresh, now, cost, &out->fixed, expires);
}
bool OpsCarry(const Policy& p, const WrittenUnder& w, Micros /*now*/, WordState* s) {
  return CarryFixedWindow(p, w, &s->fixed);
}
Decision OpsCharge(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires) {
  return FixedWindowCharge(p, in.fixed, fresh, now, cost, OverageBound(p), &out->fixed, expires);
}

}  // namespace

const WordOps kFixedWindowOps = {OpsDecide, OpsRefund, OpsPenalize, OpsCarry, OpsCharge};

}  // namespace sluice::core
