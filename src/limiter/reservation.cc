// Waiting instead of rejecting (docs/library.md): Reservation, Limiter::Reserve and
// Limiter::AcquireWaiting with its per-key lines.
#include <algorithm>
#include <string>

#include "limiter/limiter_impl.h"
#include "sluice/limiter.h"

namespace sluice {

using limiter_impl::kMaxChecks;
using limiter_impl::Scratch;

// ---- Waiting instead of rejecting (issue #12) ----

Reservation::Reservation(Reservation&& other) noexcept
    : limiter_(other.limiter_), decision_(other.decision_), held_(std::move(other.held_)) {
  other.held_.clear();
}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    limiter_ = other.limiter_;
    decision_ = other.decision_;
    held_ = std::move(other.held_);
    other.held_.clear();
  }
  return *this;
}

Reservation::~Reservation() = default;

Status Reservation::Cancel() {
  if (held_.empty()) return Status::Ok();
  const std::vector<Held> held = std::move(held_);
  held_.clear();
  Check checks[kMaxChecks];
  for (std::size_t i = 0; i < held.size(); ++i) {
    checks[i] = Check{held[i].policy, held[i].key, held[i].cost};
  }
  return limiter_->Refund(std::span<const Check>(checks, held.size()));
}

Result<Reservation> Limiter::Reserve(std::string_view key, std::uint64_t cost, Micros max_wait,
                                     std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  for (std::size_t i = 0; i < ps.size(); ++i) checks[i] = Check{i, key, cost};
  return Reserve(std::span<const Check>(checks.data(), ps.size()), max_wait, per_policy);
}

Result<Reservation> Limiter::Reserve(std::span<const Check> checks, Micros max_wait,
                                     std::span<Decision> per_check) {
  // Per-check decisions are needed to know what was taken: into the caller's span, or
  // a local one (Decide rejects more than kMaxChecks checks, or a span too small).
  Scratch<Decision, kMaxChecks> local;
  std::span<Decision> out =
      per_check.empty() ? std::span<Decision>(local.data(), std::min(checks.size(), kMaxChecks))
                        : per_check;
  auto d = impl_->Decide(checks, max_wait, out);
  if (!d.ok()) return d.status();
  Reservation r;
  r.limiter_ = this;
  r.decision_ = *d;
  if (!d->allowed) return r;
  // What a Cancel gives back: the checks the store charged. Budget a fail-open,
  // fallback or shadow-denied check did not take there is not refunded to it.
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Decision& c = out[i];
    if (checks[i].cost == 0 || !c.allowed || c.shadow_denied ||
        c.source != DecisionSource::kStore) {
      continue;
    }
    r.held_.push_back(
        Reservation::Held{checks[i].policy, checks[i].cost, std::string(checks[i].key)});
  }
  return r;
}

Result<Decision> Limiter::AcquireWaiting(std::string_view key, std::uint64_t cost, Micros max_wait,
                                         CancellationToken* cancel,
                                         std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  for (std::size_t i = 0; i < ps.size(); ++i) checks[i] = Check{i, key, cost};
  return AcquireWaiting(std::span<const Check>(checks.data(), ps.size()), max_wait, cancel,
                        per_policy);
}

Limiter::Impl::LinePlace::LinePlace(Impl& impl, std::string key, Micros due)
    : impl_(impl), key_(std::move(key)) {
  std::lock_guard<std::mutex> lock(impl_.line_mu);
  Line& line = impl_.lines[key_];
  ticket_ = line.next++;
  line.waiters.push_back({ticket_, due});
}

Limiter::Impl::LinePlace::~LinePlace() {
  Leave();
}

void Limiter::Impl::LinePlace::Leave() {
  if (!in_line_) return;
  in_line_ = false;
  {
    std::lock_guard<std::mutex> lock(impl_.line_mu);
    auto it = impl_.lines.find(key_);
    auto& w = it->second.waiters;
    w.erase(std::find_if(w.begin(), w.end(), [&](const auto& x) { return x.ticket == ticket_; }));
    if (w.empty()) impl_.lines.erase(it);
  }
  impl_.line_cv.notify_all();
}

void Limiter::Impl::LinePlace::SetDue(Micros due) {
  {
    std::lock_guard<std::mutex> lock(impl_.line_mu);
    for (auto& x : impl_.lines[key_].waiters) {
      if (x.ticket == ticket_) x.due = due;
    }
  }
  impl_.line_cv.notify_all();
}

bool Limiter::Impl::LinePlace::AwaitTurn(const Clock& clock, CancellationToken* cancel) {
  std::uint64_t id = 0;
  // Subscribed before the line's lock is taken: a token already cancelled runs the
  // callback at once, and it takes that lock.
  if (cancel != nullptr) {
    id = cancel->OnCancel([this] {
      std::lock_guard<std::mutex> lock(impl_.line_mu);
      impl_.line_cv.notify_all();
    });
  }
  bool turn;
  {
    std::unique_lock<std::mutex> lock(impl_.line_mu);
    impl_.line_cv.wait(lock, [&] {
      if (cancel != nullptr && cancel->IsCancelled()) return true;
      const Micros now = clock.Now();
      for (const auto& x : impl_.lines[key_].waiters) {
        if (x.ticket == ticket_) return true;
        if (x.due <= now) return false;  // a caller ahead is trying
      }
      return true;
    });
    turn = cancel == nullptr || !cancel->IsCancelled();
  }
  if (cancel != nullptr) cancel->Unsubscribe(id);
  return turn;
}

Result<Decision> Limiter::AcquireWaiting(std::span<const Check> checks, Micros max_wait,
                                         CancellationToken* cancel, std::span<Decision> per_check) {
  Sleeper& sleeper = *impl_->options.sleeper;
  const Clock& clock = *impl_->options.clock;
  const Micros start = clock.Now();
  // Time is read from the limiter's clock (waiting in line counts against max_wait).
  const Micros deadline = start + std::max<Micros>(0, max_wait);
  std::string line_key;
  for (const Check& c : checks) {
    line_key.append(std::to_string(c.policy)).push_back('\0');
    line_key.append(c.key).push_back('\0');
  }
  Impl::LinePlace place(*impl_, std::move(line_key), start);
  for (;;) {
    if (cancel != nullptr && cancel->IsCancelled()) {
      return Status::Cancelled("the wait was cancelled before anything was taken");
    }
    if (!place.AwaitTurn(clock, cancel)) {
      return Status::Cancelled("the wait was cancelled before anything was taken");
    }
    const Micros now = clock.Now();
    const Micros left = max_wait < 0 ? max_wait : std::max<Micros>(0, deadline - now);
    const Micros waited = std::max<Micros>(0, now - start);
    auto r = Reserve(checks, left, per_check);
    if (!r.ok()) return r.status();
    if (r->allowed()) {
      place.Leave();  // the budget is taken, in arrival order: those behind may go
      if (!sleeper.SleepFor(r->wait(), cancel)) {
        const Status refund = r->Cancel();
        return Status::Cancelled(
            refund.ok() ? "the wait was cancelled; the reservation was given back"
                        : "the wait was cancelled; giving the reservation back failed (" +
                              refund.ToString() + "): its budget stays taken");
      }
      Decision d = r->decision();
      d.wait = waited + r->wait();
      return d;
    }
    // Denied. A window algorithm never reserves: wait for its retry time when that fits
    // in what is left of max_wait, and try again. (A bucket or GCRA denial's
    // retry_after is beyond `left` by definition.)
    const Decision& d = r->decision();
    if (d.retry_after <= 0 || d.retry_after > left) return d;
    place.SetDue(now + d.retry_after);
    if (!sleeper.SleepFor(d.retry_after, cancel)) {
      return Status::Cancelled("the wait was cancelled before anything was taken");
    }
  }
}

}  // namespace sluice
