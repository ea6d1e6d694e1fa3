// The decision layer: deny cache, one atomic store call, failure modes, shadow
// batches, the binding decision and the counters, for any policies the caller names.
// One flow serves the synchronous and the asynchronous entry points; the steps it
// takes are in decider_outcome.cc.
#include "decide/decider.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "decide/decider_impl.h"

namespace sluice::decide {

Policy FallbackPolicy(const Policy& p) {
  Policy f = p;
  const std::uint64_t d = std::max<std::uint64_t>(1, p.fallback_divisor);
  f.limit = std::max<std::uint64_t>(1, (p.limit + d - 1) / d);
  if (p.burst != 0) f.burst = std::max<std::uint64_t>(1, (p.burst + d - 1) / d);
  if (p.initial_tokens) f.initial_tokens = std::min(*p.initial_tokens, f.Capacity());
  return f;
}

std::size_t BindingIndex(std::span<const Decision> d) {
  std::size_t bind = 0;
  bool any_denied = false;
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (!d[i].allowed) {
      if (!any_denied || d[i].retry_after > d[bind].retry_after) bind = i;
      any_denied = true;
    } else if (!any_denied && (d[i].wait > d[bind].wait ||
                               (d[i].wait == d[bind].wait && d[i].remaining < d[bind].remaining))) {
      bind = i;  // reservations: the longest wait binds (plain decisions all wait 0)
    }
  }
  return bind;
}

Decider::Decider(Options options) {
  if (!options.clock) options.clock = std::make_shared<SteadyEpochClock>();
  impl_ = std::make_shared<Impl>(std::move(options));
}

Decider::~Decider() {
  // Give every lease back before the store may go: one synchronous refund each, so
  // that a process ending cleanly leaves no budget held. After a failure the rest are
  // left (each would wait for its own timeout): their units stay taken until their
  // window or refill gives them back, as a killed process's would.
  std::vector<LeaseReturn> returns;
  const Micros now = impl_->options.clock->Now();
  impl_->leases.EndAll(now, &returns);
  for (LeaseReturn& r : returns) {
    const StoreCheck sc{.policy = &r.policy, .key = r.key, .cost = r.units};
    impl_->Counters().lease_returns.fetch_add(1, std::memory_order_relaxed);
    const StoreBatch refund{
        .op = StoreOp::kRefund, .checks = std::span<const StoreCheck>(&sc, 1), .now = now};
    if (!impl_->options.store->Run(refund, {}).ok()) break;
  }
}

// ---- One flow for every entry point --------------------------------------------------
//
// A batch goes: the lease (one leased check) or the groups (enforced checks, then shadow
// checks in a batch of their own: a would-be denial by a shadow policy must not stop
// the enforced ones from being charged, nor the other way round), each group through the
// deny cache or one store call and AfterStore, then Finish. Decide runs it on its stack
// with the store's synchronous Run, DecideAsync on the heap with RunAsync: the steps are
// the same functions, only Flow::Call differs.
namespace {

struct Flow;
// What to do once a store call of the flow is answered (its decisions are in place).
using Step = void (*)(Flow& f, const Status& s);

struct Flow {
  Flow() {}  // the arrays are filled for the checks used, not zeroed per call
  Decider::Impl* im = nullptr;
  std::span<const Check> checks;  // caller order (DecideAsync: its own copies)
  union {
    Check grouped[kMaxBatchChecks];  // enforced first, then shadow
  };
  union {
    Decision decided[kMaxBatchChecks];  // grouped order
  };
  std::size_t from[kMaxBatchChecks];  // grouped index -> caller index
  std::size_t n = 0, enforced = 0;
  std::size_t first = 0, count = 0;  // the group in flight
  Micros now = 0;
  StoreOp op = StoreOp::kDecide;
  std::uint64_t lease_grant = 0;  // > 0: ask the store for a lease of this many units
  Decider::Impl::Group group;
  // Where the answer goes: Decide's `out` (and status, binding), or DecideAsync's `done`.
  std::span<Decision> sync_out;
  Status status;
  std::size_t bind = 0;
  DoneCallback done;
  // Set for DecideAsync: the flow on the heap, which each store call keeps alive.
  std::shared_ptr<Flow> (*self)(Flow&) = nullptr;
};

// DecideAsync's flow: the caller's keys and permit (or usage reservation) ids end
// when it returns.
struct HeapFlow final : Flow, std::enable_shared_from_this<HeapFlow> {
  std::shared_ptr<Decider::Impl> keep;
  Check owned[kMaxBatchChecks];
  std::string keys[kMaxBatchChecks];
  std::string permits[kMaxBatchChecks];
};

std::shared_ptr<Flow> SelfOf(Flow& f) {
  return static_cast<HeapFlow&>(f).shared_from_this();
}

// Runs `batch` on the store, its decisions into `into` (policy indices kept), then
// `next`. The batch needs to live only during this call.
void Call(Flow& f, const StoreBatch& batch, std::span<Decision> into, Step next) {
  Store& store = *f.im->options.store;
  if (f.self == nullptr) {
    std::uint16_t idx[kMaxBatchChecks];
    for (std::size_t i = 0; i < into.size(); ++i) idx[i] = into[i].policy_index;
    Decider::Impl::ClearDecisions(into);  // the store writes whole decisions
    const Status s = store.Run(batch, into);
    for (std::size_t i = 0; i < into.size(); ++i) into[i].policy_index = idx[i];
    next(f, s);
    return;
  }
  store.RunAsync(batch, [p = f.self(f), into, next](const Status& s, std::span<const Decision> d) {
    if (s.ok()) {
      for (std::size_t i = 0; i < into.size() && i < d.size(); ++i) {
        const std::uint16_t idx = into[i].policy_index;
        into[i] = d[i];
        into[i].policy_index = idx;
      }
    }
    next(*p, s);
  });
}

// The end: the decisions in caller order, the shadow rewrite, the binding index.
void Complete(Flow& f, const Status& s) {
  if (!s.ok()) {
    if (f.self == nullptr) {
      f.status = s;
    } else {
      f.done(s, {}, 0);
    }
    return;
  }
  Decision local[kMaxBatchChecks];
  std::span<Decision> out =
      f.self == nullptr ? f.sync_out.first(f.n) : std::span<Decision>(local, f.n);
  for (std::size_t k = 0; k < f.n; ++k) out[f.from[k]] = f.decided[k];
  f.bind = f.im->Finish(f.checks, out);
  if (f.self != nullptr) f.done(Status::Ok(), out, f.bind);
}

void RunGroup(Flow& f, std::size_t first, std::size_t count);

void NextGroup(Flow& f) {
  const std::size_t end = f.first + f.count;
  if (end < f.n) {
    RunGroup(f, end, f.n - end);
  } else {
    Complete(f, Status::Ok());
  }
}

void AfterGroup(Flow& f, const Status& s) {
  const Status st =
      f.im->AfterStore(f.group, s, f.now, std::span<Decision>(f.decided + f.first, f.count));
  if (!st.ok()) return Complete(f, st);
  NextGroup(f);
}

// Decides the group [first, first + count) of f.grouped.
void RunGroup(Flow& f, std::size_t first, std::size_t count) {
  f.first = first;
  f.count = count;
  Decider::Impl::MakeGroup(std::span<const Check>(f.grouped + first, count), f.group, f.op);
  const std::span<Decision> out(f.decided + first, count);
  if (f.im->FromDenyCache(f.group, f.now, out)) return NextGroup(f);
  Call(f, Decider::Impl::BatchOf(f.group, f.now), out, &AfterGroup);
}

void AfterLeaseCall(Flow& f, const Status& s) {
  if (f.im->AfterLease(f.group, f.lease_grant, f.now, s, std::span<Decision>(f.decided, 1))) {
    Complete(f, Status::Ok());
  } else {
    RunGroup(f, 0, 1);  // the lease was denied; the caller's own cost may pass
  }
}

// A lease request of f.lease_grant units for the single check.
void RunLease(Flow& f) {
  Decider::Impl::MakeGroup(std::span<const Check>(f.grouped, 1), f.group);
  f.first = 0;
  f.count = 1;
  const std::span<Decision> out(f.decided, 1);
  if (f.im->FromDenyCache(f.group, f.now, out)) {  // the caller's cost is known to be denied
    f.im->leases.Failed(f.grouped[0].key);
    return Complete(f, Status::Ok());
  }
  const StoreCheck sc{
      .policy = f.grouped[0].policy, .key = f.grouped[0].key, .cost = f.lease_grant};
  Call(f, StoreBatch{.checks = std::span<const StoreCheck>(&sc, 1), .now = f.now}, out,
       &AfterLeaseCall);
}

// Fills f's groups from f.checks (the decisions' policy indices from `idx`, or the
// check's index when null), then runs the flow.
void Start(Flow& f, const std::span<const Decision> idx) {
  f.n = f.checks.size();
  std::size_t k = 0;
  for (bool shadow : {false, true}) {
    for (std::size_t i = 0; i < f.n; ++i) {
      if (f.checks[i].policy->shadow != shadow) continue;
      f.grouped[k] = f.checks[i];
      f.decided[k] = Decision{};
      f.decided[k].policy_index = idx.empty() ? static_cast<std::uint16_t>(i) : idx[i].policy_index;
      f.from[k++] = i;
    }
    if (!shadow) f.enforced = k;
  }
  if (f.lease_grant > 0) return RunLease(f);
  RunGroup(f, 0, f.enforced == 0 || f.enforced == f.n ? f.n : f.enforced);
}

// The lease of a lease-eligible batch (op kDecide): kLocal decides out[0], kRefill sets
// the grant to ask for.
bool DecidedByLease(Decider::Impl& im, std::span<const Check> checks, Micros now, StoreOp op,
                    std::span<Decision> out, std::uint64_t* grant) {
  if (op != StoreOp::kDecide || !Decider::Impl::LeaseEligible(checks)) return false;
  const LeaseTable::Take t = im.LeaseAcquire(checks[0], now, out);
  if (t.outcome == LeaseTable::Outcome::kRefill) *grant = t.grant;
  return t.outcome == LeaseTable::Outcome::kLocal;
}

}  // namespace

Result<std::size_t> Decider::Decide(std::span<const Check> checks, std::span<Decision> out) {
  Impl& im = *impl_;
  if (checks.size() == 1 && im.in_process && checks[0].policy != nullptr &&
      !checks[0].policy->shadow && checks[0].policy->lease == 0 &&
      checks[0].cost <= checks[0].policy->MaxCost() && out.size() >= 1) {
    // One enforced check, without a lease, on an in-process store (the deny cache is off
    // for it): straight to the store, nothing copied or cleared. It goes through the
    // store the decider was given, so that wrappers still see the call (sluiced's
    // latency histogram and key-cap count); the store validates the check. A store
    // error takes the general path's handling.
    const Check& c = checks[0];
    const StoreCheck sc = Impl::ToStoreCheck(c, c.cost);
    const std::uint16_t idx = out[0].policy_index;
    // (RunOne reads the clock after it starts loading the key's state.)
    const Status s = im.options.store->RunOne(sc, *im.options.clock, &out[0]);
    out[0].policy_index = idx;
    if (!s.ok()) {
      const Micros now = im.options.clock->Now();
      Impl::Group g;
      Impl::MakeGroup(checks, g);
      if (Status st = im.AfterStore(g, s, now, out); !st.ok()) return st;
    }
    return im.Finish(checks, out, /*in_process=*/true);
  }
  if (Status s = Impl::Validate(checks, out.size(), StoreOp::kDecide); !s.ok()) return s;
  Flow f;
  f.im = &im;
  f.now = im.options.clock->Now();
  if (DecidedByLease(im, checks, f.now, StoreOp::kDecide, out, &f.lease_grant)) {
    return im.Finish(checks, out);
  }
  f.checks = checks;
  f.sync_out = out;
  Start(f, out);
  if (!f.status.ok()) return f.status;
  return f.bind;
}

void Decider::DecideAsync(std::span<const Check> checks, DoneCallback done, StoreOp op) {
  if (Status s = Impl::Validate(checks, checks.size(), op); !s.ok()) {
    done(s, {}, 0);
    return;
  }
  const Micros now = impl_->options.clock->Now();
  std::uint64_t grant = 0;
  {
    // The hot path of a leased key: decided here, without copying the batch.
    Decision out[1];
    out[0].policy_index = 0;
    if (DecidedByLease(*impl_, checks, now, op, out, &grant)) {
      const std::size_t bind = impl_->Finish(checks, out);
      done(Status::Ok(), std::span<const Decision>(out, 1), bind);
      return;
    }
  }
  auto f = std::make_shared<HeapFlow>();
  f->keep = impl_;
  f->im = impl_.get();
  f->self = &SelfOf;
  f->done = std::move(done);
  f->now = now;
  f->op = op;
  f->lease_grant = grant;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    f->keys[i].assign(checks[i].key);
    f->owned[i] = checks[i];
    f->owned[i].key = f->keys[i];
    if (!checks[i].permit.empty()) {
      f->permits[i].assign(checks[i].permit);
      f->owned[i].permit = f->permits[i];
    } else if (!checks[i].usage_id.empty()) {  // (a rate check: it has no permit)
      f->permits[i].assign(checks[i].usage_id);
      f->owned[i].usage_id = f->permits[i];
    }
  }
  f->checks = std::span<const Check>(f->owned, checks.size());
  Start(*f, {});
}

Result<std::size_t> Decider::Penalize(std::span<const Check> checks, std::span<Decision> out) {
  if (Status s = Impl::Validate(checks, out.size(), StoreOp::kPenalize); !s.ok()) return s;
  Impl& im = *impl_;
  Impl::Group g;
  Impl::MakeGroup(checks, g, StoreOp::kPenalize);
  std::uint16_t idx[kMaxBatchChecks];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    idx[i] = out[i].policy_index;
    out[i] = Decision{};
  }
  const Micros now = im.options.clock->Now();
  if (Status s = im.options.store->Run(Impl::BatchOf(g, now), out.first(checks.size())); !s.ok()) {
    return s;
  }
  for (std::size_t i = 0; i < checks.size(); ++i) {
    out[i].policy_index = idx[i];
    // This process's lease of the key would keep granting units the penalty took:
    // it ends (its units stay taken, the conservative side).
    if (checks[i].policy->lease != 0) im.leases.Drop(checks[i].key);
    // The key stays denied for any cost until then (a penalty only takes budget).
    if (!out[i].allowed && im.use_deny_cache) im.deny_cache.Insert(checks[i].key, 1, now, out[i]);
    if (!out[i].allowed && checks[i].policy->shadow) {
      out[i].allowed = true;
      out[i].shadow_denied = true;
      out[i].retry_after = 0;
    }
  }
  return BindingIndex(out.first(checks.size()));
}

Status Decider::Reset(const Policy& policy, const Policy* fallback, std::string_view key) {
  if (Status s = impl_->options.store->Reset(policy, key); !s.ok()) return s;
  (void)impl_->fallback_store.Reset(fallback != nullptr ? *fallback : policy, key);
  impl_->deny_cache.Erase(key);
  impl_->leases.Drop(key);
  return Status::Ok();
}

void Decider::ForgetDenial(std::string_view key) {
  impl_->deny_cache.Erase(key);
}

LimiterStats Decider::Stats() const {
  LimiterStats s;
  for (const CounterStripe& c : impl_->stripes) {
    s.decisions +=
        c.decisions.load(std::memory_order_relaxed) + c.in_process.load(std::memory_order_relaxed);
    s.denied += c.denied.load(std::memory_order_relaxed);
    s.shadow_denied += c.shadow_denied.load(std::memory_order_relaxed);
    s.deny_cache_hits += c.deny_cache_hits.load(std::memory_order_relaxed);
    s.store_errors += c.store_errors.load(std::memory_order_relaxed);
    s.fail_open += c.fail_open.load(std::memory_order_relaxed);
    s.fail_closed += c.fail_closed.load(std::memory_order_relaxed);
    s.local_fallback += c.local_fallback.load(std::memory_order_relaxed);
    s.lease_hits += c.lease_hits.load(std::memory_order_relaxed);
    s.lease_grants += c.lease_grants.load(std::memory_order_relaxed);
    s.lease_returns += c.lease_returns.load(std::memory_order_relaxed);
  }
  return s;
}

std::uint64_t Decider::InProcessDecisions() const {
  std::uint64_t n = 0;
  for (const CounterStripe& c : impl_->stripes) n += c.in_process.load(std::memory_order_relaxed);
  return n;
}

std::size_t Decider::DenyCacheBytes() const {
  return impl_->use_deny_cache ? impl_->deny_cache.bytes() : 0;
}

std::size_t Decider::FallbackKeys() const {
  return impl_->fallback_store.Stats().keys;
}
std::size_t Decider::FallbackMaxKeys() const {
  return impl_->options.fallback_max_keys;
}

Store& Decider::store() const {
  return *impl_->options.store;
}
const Clock& Decider::clock() const {
  return *impl_->options.clock;
}
Store& Decider::fallback_store() const {
  return impl_->fallback_store;
}

}  // namespace sluice::decide
