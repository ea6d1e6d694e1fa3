// Limiter: policies, keys and costs in; it validates them, builds the store keys and
// hands the batch to its Decider (limiter/decider.h), which owns the deny cache,
// failure modes, shadow mode and counters.
#include "sluice/limiter.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "core/key_escape.h"
#include "limiter/decider.h"
#include "limiter/limiter_internal.h"
#include "limiter/permit_internal.h"
#include "sluice/key.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

constexpr std::size_t kMaxChecks = kMaxBatchChecks;

bool ValidPrefix(std::string_view p) {
  if (p.empty() || p.size() > 64) return false;
  for (char c : p) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Storage for up to N objects of a trivially copyable type, left uninitialised: the
// hot path fills the entries it uses instead of zeroing all N.
template <typename T, std::size_t N>
class Scratch {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  T* data() { return reinterpret_cast<T*>(bytes_); }
  T& operator[](std::size_t i) { return data()[i]; }

 private:
  alignas(T) unsigned char bytes_[sizeof(T) * N];
};

}  // namespace

namespace limiter_internal {

std::string_view BuildStoreKeyView(std::string& buf, std::string_view prefix, std::string_view key,
                                   std::string_view policy) {
  const std::size_t longest = prefix.size() + 2 + 3 * key.size() + 2 + policy.size();
  // Grown, never shrunk: once the buffer has held the longest key, nothing is
  // allocated or cleared here.
  if (buf.size() < longest) buf.resize(std::max(longest, 2 * buf.size()));
  char* const start = buf.data();
  char* p = start;
  std::memcpy(p, prefix.data(), prefix.size());
  p += prefix.size();
  *p++ = ':';
  *p++ = '{';
  p = key_internal::WriteEscaped(p, key);
  *p++ = '}';
  *p++ = ':';
  std::memcpy(p, policy.data(), policy.size());
  p += policy.size();
  return {start, static_cast<std::size_t>(p - start)};
}

void BuildStoreKey(std::string& out, std::string_view prefix, std::string_view key,
                   std::string_view policy) {
  const std::size_t n = BuildStoreKeyView(out, prefix, key, policy).size();
  out.resize(n);
}

}  // namespace limiter_internal

using limiter_internal::BuildStoreKey;
using limiter_internal::BuildStoreKeyView;

struct Limiter::Impl {
  LimiterOptions options;
  // The scaled-down policies the local fallback enforces, by policy index.
  std::vector<Policy> fallback_policies;
  decide::Decider decider;

  static decide::Options DeciderOptions(const LimiterOptions& o) {
    decide::Options d;
    d.store = o.store;
    d.clock = o.clock;
    d.deny_cache = o.deny_cache;
    d.deny_cache_bytes = o.deny_cache_max_keys * 64;
    return d;
  }

  explicit Impl(LimiterOptions o) : options(std::move(o)), decider(DeciderOptions(options)) {
    for (const Policy& p : options.policies) {
      fallback_policies.push_back(decide::FallbackPolicy(p));
      has_concurrency = has_concurrency || p.algorithm == Algorithm::kConcurrency;
    }
  }

  // Acquire(checks) with StoreCheck::max_wait = `max_wait` (0: a plain decision), and
  // AcquirePermit when `permit` is not empty: then every check of a concurrency policy
  // takes a slot for `permit` (its cost is 1).
  Result<Decision> Decide(std::span<const Check> checks, Micros max_wait,
                          std::span<Decision> per_check, std::string_view permit = {});

  // AcquireWaiting's lines: the callers waiting on the same checks (policy and key
  // pairs), in arrival order, each with the time it is due to try (again). A caller
  // tries only when no caller ahead of it is due: callers who wake at the same moment
  // (a window opening) try in arrival order. Only callers of AcquireWaiting queue.
  struct Waiter {
    std::uint64_t ticket;
    Micros due;
  };
  struct Line {
    std::uint64_t next = 0;
    std::vector<Waiter> waiters;  // arrival order
  };
  std::mutex line_mu;
  std::condition_variable line_cv;
  std::unordered_map<std::string, Line> lines;

  // A place in a line of Limiter::Impl (joined on construction, left on destruction).
  class LinePlace {
   public:
    LinePlace(Impl& impl, std::string key, Micros due);
    ~LinePlace();
    LinePlace(const LinePlace&) = delete;
    LinePlace& operator=(const LinePlace&) = delete;
    // Blocks until no caller ahead is due at the clock's now, or `cancel` is cancelled
    // (returns false). Callers ahead that are due are trying now: the wait is short.
    bool AwaitTurn(const Clock& clock, CancellationToken* cancel);
    // Sets when this caller tries again, and lets those behind it go.
    void SetDue(Micros due);
    void Leave();

   private:
    Impl& impl_;
    std::string key_;
    std::uint64_t ticket_ = 0;
    bool in_line_ = true;
  };

  // --- concurrency limits (issue #12 item 1) ---
  bool has_concurrency = false;
  std::atomic<std::uint64_t> permit_release_errors{0};
};

Result<std::unique_ptr<Limiter>> Limiter::Create(LimiterOptions options) {
  if (options.policies.empty()) return Status::InvalidArgument("at least one policy is required");
  if (options.policies.size() > kMaxChecks) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) +
                                   " policies per limiter (got " +
                                   std::to_string(options.policies.size()) + ")");
  }
  for (std::size_t i = 0; i < options.policies.size(); ++i) {
    if (Status s = ValidatePolicy(options.policies[i]); !s.ok()) return s;
    for (std::size_t j = 0; j < i; ++j) {
      if (options.policies[i].name == options.policies[j].name) {
        return Status::InvalidArgument("policy name '" + options.policies[i].name +
                                       "' is used twice");
      }
    }
  }
  if (!ValidPrefix(options.key_prefix)) {
    return Status::InvalidArgument("key_prefix must be 1-64 characters of [A-Za-z0-9_.-] (got '" +
                                   options.key_prefix + "')");
  }
  if (options.shadow) {
    for (Policy& p : options.policies) p.shadow = true;
  }
  if (!options.store) options.store = std::make_shared<MemoryStore>();
  if (!options.clock) options.clock = std::make_shared<SteadyEpochClock>();
  if (!options.sleeper) options.sleeper = std::make_shared<SystemSleeper>();
  return std::unique_ptr<Limiter>(new Limiter(std::make_unique<Impl>(std::move(options))));
}

Limiter::Limiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Limiter::~Limiter() = default;

const std::vector<Policy>& Limiter::policies() const {
  return impl_->options.policies;
}

Result<std::size_t> Limiter::FindPolicy(std::string_view name) const {
  const auto& ps = impl_->options.policies;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].name == name) return i;
  }
  return Status::NotFound("no policy named '" + std::string(name) + "'");
}

Result<Decision> Limiter::Acquire(std::string_view key, std::uint64_t cost,
                                  std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  for (std::size_t i = 0; i < ps.size(); ++i) checks[i] = Check{i, key, cost};
  return Acquire(std::span<const Check>(checks.data(), ps.size()), per_policy);
}

Result<Decision> Limiter::Peek(std::string_view key, std::span<Decision> per_policy) {
  return Acquire(key, 0, per_policy);
}

Result<Decision> Limiter::Acquire(std::span<const Check> checks, std::span<Decision> per_check) {
  return impl_->Decide(checks, 0, per_check);
}

Result<Decision> Limiter::Impl::Decide(std::span<const Check> checks, Micros max_wait,
                                       std::span<Decision> per_check, std::string_view permit) {
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks)
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) + " checks per call");
  if (max_wait < 0) {
    return Status::InvalidArgument("max_wait must be >= 0 (got " + std::to_string(max_wait) +
                                   "us)");
  }
  if (!per_check.empty() && per_check.size() < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  const auto& ps = options.policies;
  thread_local std::string keys[kMaxChecks];
  Scratch<decide::Check, kMaxChecks> dchecks;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (c.policy >= ps.size()) {
      return Status::InvalidArgument("check names policy index " + std::to_string(c.policy) +
                                     " but the limiter has " + std::to_string(ps.size()));
    }
    const Policy& p = ps[c.policy];
    if (c.key.empty()) return Status::InvalidArgument("key must not be empty");
    if (c.key.size() > kMaxKeyBytes) {
      return Status::InvalidArgument("key is " + std::to_string(c.key.size()) + " bytes; at most " +
                                     std::to_string(kMaxKeyBytes) + " are allowed");
    }
    if (c.cost > p.Capacity() && !(permit.size() > 0 && p.algorithm == Algorithm::kConcurrency)) {
      return Status::InvalidArgument("cost " + std::to_string(c.cost) + " exceeds the capacity " +
                                     std::to_string(p.Capacity()) + " of policy '" + p.name +
                                     "': such a request could never pass");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (checks[j].policy == c.policy && checks[j].key == c.key) {
        return Status::InvalidArgument("policy '" + p.name + "' is checked twice for one key");
      }
    }
    if (max_wait > p.window) {
      return Status::InvalidArgument("max_wait " + std::to_string(max_wait) +
                                     "us exceeds the window " + std::to_string(p.window) +
                                     "us of policy '" + p.name +
                                     "': a reservation may wait at most one window");
    }
    dchecks[i] =
        decide::Check{&p, &fallback_policies[c.policy],
                      BuildStoreKeyView(keys[i], options.key_prefix, c.key, p.name), c.cost};
    dchecks[i].max_wait = max_wait;
    if (p.algorithm == Algorithm::kConcurrency && c.cost > 0) {
      // --- concurrency limits: a slot is taken only with a permit that can release it ---
      if (permit.empty()) {
        return Status::InvalidArgument("policy '" + p.name +
                                       "' is a concurrency limit: use AcquirePermit (Acquire "
                                       "would take a slot that nothing releases); Peek works");
      }
      dchecks[i].cost = 1;
      dchecks[i].permit = permit;
    }
  }
  Scratch<Decision, kMaxChecks> local;
  std::span<Decision> out = per_check.empty() ? std::span<Decision>(local.data(), checks.size())
                                              : per_check.first(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    out[i] = Decision{};
    out[i].policy_index = static_cast<std::uint16_t>(checks[i].policy);
  }
  auto bind = decider.Decide(std::span<const decide::Check>(dchecks.data(), checks.size()), out);
  if (!bind.ok()) return bind.status();
  return out[*bind];
}

Status Limiter::Refund(std::string_view key, std::uint64_t cost) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  std::size_t n = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    // A concurrency slot is given back by releasing its permit, not by a refund.
    if (ps[i].algorithm != Algorithm::kConcurrency) checks[n++] = Check{i, key, cost};
  }
  if (n == 0) {
    return Status::InvalidArgument(
        "every policy is a concurrency limit: there is nothing to refund (release the permit)");
  }
  return Refund(std::span<const Check>(checks.data(), n));
}

Status Limiter::Refund(std::span<const Check> checks) {
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks)
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) + " checks per call");
  const auto& ps = impl_->options.policies;
  std::string keys[kMaxChecks];
  StoreCheck store_checks[kMaxChecks];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (c.policy >= ps.size()) {
      return Status::InvalidArgument("check names policy index " + std::to_string(c.policy) +
                                     " but the limiter has " + std::to_string(ps.size()));
    }
    const Policy& p = ps[c.policy];
    if (c.key.empty() || c.key.size() > kMaxKeyBytes) {
      return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
    }
    if (p.algorithm == Algorithm::kConcurrency) {
      return Status::InvalidArgument("policy '" + p.name +
                                     "' is a concurrency limit: give its slot back with "
                                     "Release, not Refund");
    }
    if (c.cost == 0 || c.cost > p.Capacity()) {
      return Status::InvalidArgument("refund cost " + std::to_string(c.cost) + " of policy '" +
                                     p.name + "' must be 1-" + std::to_string(p.Capacity()));
    }
    BuildStoreKey(keys[i], impl_->options.key_prefix, c.key, p.name);
    store_checks[i] = StoreCheck{.policy = &p, .key = keys[i], .cost = c.cost};
  }
  Status s = impl_->options.store->Run(
      StoreBatch{.op = StoreOp::kRefund,
                 .checks = std::span<const StoreCheck>(store_checks, checks.size()),
                 .now = impl_->options.clock->Now()},
      {});
  // A key denied until later may pass now that budget came back.
  for (std::size_t i = 0; s.ok() && i < checks.size(); ++i) impl_->decider.ForgetDenial(keys[i]);
  return s;
}

Result<Decision> Limiter::Penalize(std::string_view key, std::uint64_t cost,
                                   std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
  }
  if (!per_policy.empty() && per_policy.size() < ps.size()) {
    return Status::InvalidArgument("per-policy output has fewer slots than policies");
  }
  std::string keys[kMaxChecks];
  Scratch<decide::Check, kMaxChecks> dchecks;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const Policy& p = ps[i];
    if (p.algorithm == Algorithm::kConcurrency) {  // concurrency limits (issue #12 item 1)
      return Status::InvalidArgument("policy '" + p.name +
                                     "' is a concurrency limit: penalties apply to rates only");
    }
    if (cost == 0 || cost > p.Capacity()) {
      return Status::InvalidArgument("penalty cost " + std::to_string(cost) + " of policy '" +
                                     p.name + "' must be 1-" + std::to_string(p.Capacity()));
    }
    BuildStoreKey(keys[i], impl_->options.key_prefix, key, p.name);
    dchecks[i] = decide::Check{&p, &impl_->fallback_policies[i], keys[i], cost};
  }
  Scratch<Decision, kMaxChecks> local;
  std::span<Decision> out = per_policy.empty() ? std::span<Decision>(local.data(), ps.size())
                                               : per_policy.first(ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    out[i] = Decision{};
    out[i].policy_index = static_cast<std::uint16_t>(i);
  }
  auto bind =
      impl_->decider.Penalize(std::span<const decide::Check>(dchecks.data(), ps.size()), out);
  if (!bind.ok()) return bind.status();
  return out[*bind];
}

Status Limiter::Reward(std::string_view key, std::uint64_t cost) {
  return Refund(key, cost);
}

Status Limiter::Reset(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
  }
  std::string k;
  const auto& ps = impl_->options.policies;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    BuildStoreKey(k, impl_->options.key_prefix, key, ps[i].name);
    if (Status s = impl_->decider.Reset(ps[i], &impl_->fallback_policies[i], k); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

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

LimiterStats Limiter::Stats() const {
  LimiterStats s = impl_->decider.Stats();
  s.permit_release_errors = impl_->permit_release_errors.load(std::memory_order_relaxed);
  return s;
}

// --- concurrency limits (issue #12 item 1) ---

Result<Permit> Limiter::AcquirePermit(std::string_view key, std::uint64_t cost,
                                      std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  if (cost == 0) {
    return Status::InvalidArgument("AcquirePermit's cost must be at least 1 (Peek takes nothing)");
  }
  Scratch<Check, kMaxChecks> checks;
  for (std::size_t i = 0; i < ps.size(); ++i) checks[i] = Check{i, key, cost};
  return AcquirePermit(std::span<const Check>(checks.data(), ps.size()), per_policy);
}

Result<Permit> Limiter::AcquirePermit(std::span<const Check> checks,
                                      std::span<Decision> per_check) {
  const auto& ps = impl_->options.policies;
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks)
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) + " checks per call");
  if (!per_check.empty() && per_check.size() < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  // Each concurrency check takes one slot, whatever its cost.
  Scratch<Check, kMaxChecks> own;
  bool any = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    own[i] = checks[i];
    if (checks[i].policy < ps.size() && ps[checks[i].policy].algorithm == Algorithm::kConcurrency) {
      own[i].cost = 1;
      any = true;
    }
  }
  if (!any) {
    return Status::InvalidArgument(
        "AcquirePermit needs a check of a concurrency policy (Policy::Concurrency) and there "
        "is none: use Acquire");
  }
  Permit permit;
  permit.id_ = permit_internal::NewPermitId();
  Scratch<Decision, kMaxChecks> local;
  std::span<Decision> out = per_check.empty() ? std::span<Decision>(local.data(), checks.size())
                                              : per_check.first(checks.size());
  auto d = impl_->Decide(std::span<const Check>(own.data(), checks.size()), 0, out, permit.id_);
  if (!d.ok()) return d.status();
  permit.limiter_ = this;
  permit.key_.assign(checks[0].key);
  permit.decision_ = *d;
  if (!d->allowed) return permit;
  permit.held_ = true;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (ps[checks[i].policy].algorithm != Algorithm::kConcurrency || out[i].shadow_denied) {
      continue;
    }
    const bool store = out[i].source == DecisionSource::kStore;
    const bool fallback = out[i].source == DecisionSource::kLocalFallback;
    if (!store && !fallback) continue;  // fail-open: held nowhere
    permit.slots_.push_back(Permit::Slot{static_cast<std::uint16_t>(checks[i].policy), fallback,
                                         std::string(checks[i].key)});
  }
  return permit;
}

namespace {

// One slot to release or extend: a policy (index) and a caller key.
struct PermitSlot {
  std::size_t policy;
  std::string_view key;
};

// Releases or extends `id` in the slots `slots` of `store` (their policies from
// `policies`). Sets *found when any of them held it.
Status PermitOnStore(Store& store, const std::vector<Policy>& policies,
                     std::span<const PermitSlot> slots, const std::string& prefix,
                     std::string_view id, StoreOp op, Micros now, bool* found) {
  if (slots.empty()) return Status::Ok();
  if (slots.size() > kMaxChecks)
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) + " checks per call");
  std::string keys[kMaxChecks];
  StoreCheck checks[kMaxChecks];
  for (std::size_t n = 0; n < slots.size(); ++n) {
    const Policy& p = policies[slots[n].policy];
    BuildStoreKey(keys[n], prefix, slots[n].key, p.name);
    checks[n] = StoreCheck{.policy = &p, .key = keys[n], .cost = 1, .permit = id};
  }
  Decision out[kMaxChecks];
  Status s = store.Run(
      StoreBatch{.op = op, .checks = std::span<const StoreCheck>(checks, slots.size()), .now = now},
      std::span<Decision>(out, slots.size()));
  if (!s.ok()) return s;
  for (std::size_t i = 0; i < slots.size(); ++i) *found = *found || out[i].allowed;
  return Status::Ok();
}

Status NotHeld(std::string_view key, std::string_view id, StoreOp op) {
  return Status::NotFound(std::string("permit '") + std::string(id) + "' of key '" +
                          std::string(key) + "' is not held (unknown, released already, or " +
                          "expired after its lease)" +
                          (op == StoreOp::kExtend ? ": it cannot be extended" : ""));
}

}  // namespace

Status Limiter::PermitCall(Permit& permit, StoreOp op) {
  if (permit.slots_.empty()) return Status::Ok();  // fail-open: held nowhere
  PermitSlot in_store[kMaxChecks], in_fallback[kMaxChecks];
  std::size_t ns = 0, nf = 0;
  for (const Permit::Slot& slot : permit.slots_) {
    (slot.in_fallback ? in_fallback[nf++] : in_store[ns++]) = PermitSlot{slot.policy, slot.key};
  }
  const Micros now = impl_->options.clock->Now();
  bool found = false;
  Status s = PermitOnStore(impl_->decider.store(), impl_->options.policies,
                           std::span<const PermitSlot>(in_store, ns), impl_->options.key_prefix,
                           permit.id_, op, now, &found);
  if (!s.ok()) return s;
  s = PermitOnStore(impl_->decider.fallback_store(), impl_->fallback_policies,
                    std::span<const PermitSlot>(in_fallback, nf), impl_->options.key_prefix,
                    permit.id_, op, now, &found);
  if (!s.ok()) return s;
  return found ? Status::Ok() : NotHeld(permit.key_, permit.id_, op);
}

namespace {

Status CheckPermitArgs(bool has_concurrency, std::string_view key, std::string_view id) {
  if (!has_concurrency) {
    return Status::InvalidArgument("this limiter has no concurrency policy: no permit to release");
  }
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
  }
  if (!IsPermitId(id)) {
    return Status::InvalidArgument("permit id '" + std::string(id.substr(0, 64)) + "' must be " +
                                   std::to_string(kPermitIdLength) + " lower-case hex characters");
  }
  return Status::Ok();
}

}  // namespace

Status Limiter::Release(std::string_view key, std::string_view permit_id) {
  return PermitById(key, permit_id, StoreOp::kRelease);
}

Status Limiter::Extend(std::string_view key, std::string_view permit_id) {
  return PermitById(key, permit_id, StoreOp::kExtend);
}

Status Limiter::PermitById(std::string_view key, std::string_view permit_id, StoreOp op) {
  if (Status s = CheckPermitArgs(impl_->has_concurrency, key, permit_id); !s.ok()) return s;
  PermitSlot slots[kMaxChecks];
  std::size_t n = 0;
  for (std::size_t i = 0; i < impl_->options.policies.size(); ++i) {
    if (impl_->options.policies[i].algorithm == Algorithm::kConcurrency) {
      slots[n++] = PermitSlot{i, key};
    }
  }
  bool found = false;
  Status s = PermitOnStore(impl_->decider.store(), impl_->options.policies,
                           std::span<const PermitSlot>(slots, n), impl_->options.key_prefix,
                           permit_id, op, impl_->options.clock->Now(), &found);
  if (!s.ok()) return s;
  return found ? Status::Ok() : NotHeld(key, permit_id, op);
}

void Limiter::CountReleaseError() {
  impl_->permit_release_errors.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace sluice
