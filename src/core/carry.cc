// Carry-over of a state written under other parameters of the same policy name
// (Policy::on_change, kProportional). The Lua bodies (src/redis/lua/<algorithm>.lua)
// mirror these operation for operation, like the algorithms themselves.
#include <algorithm>
#include <cmath>

#include "core/algorithms.h"

namespace sluice::core {

namespace {

// ceil(c * limit / old_limit), at most the new limit (a count over its old limit,
// kept as_is before, is "all used", not more).
std::uint64_t ScaleCount(std::uint64_t c, const Policy& p, const WrittenUnder& w) {
  const double limit = static_cast<double>(p.limit);
  return static_cast<std::uint64_t>(
      std::min(limit, std::ceil(static_cast<double>(c) * limit / w.limit)));
}

}  // namespace

WrittenUnder ParamsOf(const Policy& p) {
  return WrittenUnder{static_cast<double>(p.limit), static_cast<double>(p.window),
                      static_cast<double>(p.Capacity())};
}

bool SameParams(const Policy& p, const WrittenUnder& w) {
  return w.limit == static_cast<double>(p.limit) && w.window == static_cast<double>(p.window) &&
         w.cap == static_cast<double>(p.Capacity());
}

bool CarryFixedWindow(const Policy& p, const WrittenUnder& w, FixedWindowState* s) {
  if (w.window != static_cast<double>(p.window)) return false;
  s->count = ScaleCount(s->count, p, w);
  return true;
}

bool CarrySlidingWindowCounter(const Policy& p, const WrittenUnder& w, SlidingCounterState* s) {
  if (w.window != static_cast<double>(p.window)) return false;
  s->curr = ScaleCount(s->curr, p, w);
  s->prev = ScaleCount(s->prev, p, w);
  return true;
}

bool CarryTokenBucket(const Policy& p, const WrittenUnder& w, Micros now, TokenBucketState* s) {
  const double old_rate = w.limit / w.window;
  const Micros t = std::max(now, s->last);
  const double tokens = std::min(w.cap, s->tokens + static_cast<double>(t - s->last) * old_rate);
  s->tokens = tokens * static_cast<double>(p.Capacity()) / w.cap;
  s->last = t;
  return true;
}

bool CarryGcra(const Policy& p, const WrittenUnder& w, Micros now, GcraState* s) {
  const double t = static_cast<double>(now);
  if (s->tat > t) {
    const double old_tau = w.window / w.limit * w.cap;
    const double tau = static_cast<double>(p.window) / static_cast<double>(p.limit) *
                       static_cast<double>(p.Capacity());
    s->tat = t + (s->tat - t) * tau / old_tau;
  }
  return true;
}

}  // namespace sluice::core
