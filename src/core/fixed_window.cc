// Fixed window: one counter per epoch-aligned window of length W.
//
//   ws = floor(now / W) * W, but never before the stored window (time going back)
//   count = stored count if the stored window is ws, else 0
//   allowed  <=> count + max(cost, 1) <= limit
// At a window boundary up to 2 x limit can pass within a short time: the article's
// "100 at 12:00:59 and 100 at 12:01:00". That is this algorithm's documented behaviour.
#include <algorithm>

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

}  // namespace sluice::core
