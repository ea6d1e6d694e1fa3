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

#include "core/algorithm_ops.h"
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
    d.retry_after = std::max<Micros>(1, CeilMicros(new_tat - tau - t));
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

// Penalties and overage (core/penalties.cc has the shared rules).
Decision GcraCharge(const Policy& p, const GcraState& in, bool fresh, Micros now,
                    std::uint64_t cost, std::uint64_t bound, GcraState* out, Micros* expires) {
  GcraState s;
  Micros e;
  (void)Gcra(p, in, fresh, now, 0, &s, &e);
  const double interval = static_cast<double>(p.window) / static_cast<double>(p.limit);
  const double most = static_cast<double>(now) + static_cast<double>(bound) * interval;
  const double was = s.tat;
  s.tat = std::max(s.tat, std::min(s.tat + static_cast<double>(cost) * interval, most));
  Decision d = Gcra(p, s, /*fresh=*/false, now, 0, out, expires);
  d.charged = ChargedUnits((s.tat - was) / interval);
  return d;
}

Decision GcraPenalize(const Policy& p, const GcraState& in, bool fresh, Micros now,
                      std::uint64_t cost, GcraState* out, Micros* expires) {
  return GcraCharge(p, in, fresh, now, cost, PenaltyBound(p), out, expires);
}

// Carry-over (Policy::on_change, kProportional; core/carry.cc has the shared rules).
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

// This algorithm's entry of the operations table (core/algorithm_ops.h).
namespace {

Decision OpsDecide(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires, Micros max_wait) {
  return Gcra(p, in.gcra, fresh, now, cost, &out->gcra, expires, max_wait);
}
void OpsRefund(const Policy& p, const WordState& in, Micros now, std::uint64_t cost, WordState* out,
               Micros* expires) {
  GcraRefund(p, in.gcra, now, cost, &out->gcra, expires);
}
Decision OpsPenalize(const Policy& p, const WordState& in, bool fresh, Micros now,
                     std::uint64_t cost, WordState* out, Micros* expires) {
  return GcraPenalize(p, in.gcra, fresh, now, cost, &out->gcra, expires);
}
bool OpsCarry(const Policy& p, const WrittenUnder& w, Micros now, WordState* s) {
  return CarryGcra(p, w, now, &s->gcra);
}

Decision OpsCharge(const Policy& p, const WordState& in, bool fresh, Micros now, std::uint64_t cost,
                   WordState* out, Micros* expires) {
  return GcraCharge(p, in.gcra, fresh, now, cost, OverageBound(p), &out->gcra, expires);
}

}  // namespace

const WordOps kGcraOps = {OpsDecide, OpsRefund, OpsPenalize, OpsCarry, OpsCharge};

}  // namespace sluice::core
