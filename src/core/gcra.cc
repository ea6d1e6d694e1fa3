// GCRA (generic cell rate algorithm): a token bucket in the time domain. The only
// state is the theoretical arrival time (TAT) of the next request at the sustained
// rate. With emission interval T = window / limit and tolerance tau = T * burst:
//
//   tat     = max(stored tat, now)
//   new_tat = tat + max(cost, 1) * T
//   allowed <=> new_tat - now <= tau + eps * T
// A reservation (max_wait > 0) that this denies with retry_after <= max_wait is allowed
// with wait = retry_after = ceil(new_tat - tau - now), and takes its slot at once.
// The limit is fully available again once TAT <= now.
#include <algorithm>
#include <cmath>

#include "core/algorithms.h"

namespace sluice::core {

Decision Gcra(const Policy& p, const GcraState& in, bool fresh, Micros now, std::uint64_t cost,
              GcraState* out, Micros* expires, Micros max_wait) {
  const double interval = static_cast<double>(p.window) / static_cast<double>(p.limit);
  const double tau = interval * static_cast<double>(p.Capacity());
  const double t = static_cast<double>(now);
  double tat = fresh ? t : std::max(in.tat, t);
  const double need = static_cast<double>(std::max<std::uint64_t>(cost, 1));
  const double new_tat = tat + need * interval;

  Decision d;
  d.limit = p.Capacity();
  d.allowed = new_tat - t <= tau + kEpsilon * interval;
  if (d.allowed) {
    if (cost > 0) tat = new_tat;
  } else {
    d.retry_after = std::max<Micros>(1, static_cast<Micros>(std::ceil(new_tat - tau - t)));
    // Reservation: allowed now when the request's slot comes within max_wait; the TAT
    // moves to it at once (later requests queue behind it).
    if (max_wait > 0 && cost > 0 && d.retry_after <= max_wait) {
      d.allowed = true;
      d.wait = d.retry_after;
      d.retry_after = 0;
      tat = new_tat;
    }
  }
  const double left = std::floor((tau - (tat - t)) / interval + kEpsilon);
  d.remaining = static_cast<std::uint64_t>(std::max(0.0, left));
  d.reset_after = static_cast<Micros>(std::ceil(tat - t));
  out->tat = tat;
  *expires = static_cast<Micros>(std::ceil(tat));
  return d;
}

void GcraRefund(const Policy& p, const GcraState& in, Micros now, std::uint64_t cost,
                GcraState* out, Micros* expires) {
  const double interval = static_cast<double>(p.window) / static_cast<double>(p.limit);
  const double tat =
      std::max(static_cast<double>(now), in.tat - static_cast<double>(cost) * interval);
  out->tat = tat;
  *expires = static_cast<Micros>(std::ceil(tat));
}

}  // namespace sluice::core
