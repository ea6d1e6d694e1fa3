// The decision layer: deny cache, one atomic store call, failure modes, shadow
// batches, the binding decision and the counters, for any policies the caller names.
#include "limiter/decider.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/hash.h"
#include "limiter/lease.h"
#include "sluice/memory_store.h"

namespace sluice::decide {
namespace {

// Counters of one stripe: threads add to their own stripe (one cache line), so that
// counting decisions does not bounce a shared line between cores.
struct alignas(64) CounterStripe {
  std::atomic<std::uint64_t> decisions{0}, denied{0}, shadow_denied{0}, deny_cache_hits{0},
      store_errors{0}, fail_open{0}, fail_closed{0}, local_fallback{0}, lease_hits{0},
      lease_grants{0}, lease_returns{0}, in_process{0};
};
constexpr std::size_t kCounterStripes = 16;

std::size_t ThisThreadStripe() {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % kCounterStripes;
  return stripe;
}

// A bounded, direct-mapped cache of keys known to be denied until a time. Its size is
// a byte budget fixed at construction: slots are plain 64-byte records (the key is a
// 128-bit hash, not a copy), so the cache never allocates after it is built, and its
// memory is calloc'ed (untouched pages cost no RSS). A collision overwrites:
// forgetting a denial only costs one store call.
class DenyCache {
 public:
  explicit DenyCache(std::size_t max_bytes) {
    std::size_t n = 16;
    while (n * 2 * sizeof(Entry) <= max_bytes) n <<= 1;
    slots_.reset(static_cast<Entry*>(std::calloc(n, sizeof(Entry))));
    mask_ = n - 1;
  }

  std::size_t bytes() const { return (mask_ + 1) * sizeof(Entry); }

  // True (and fills `d`) when `key` is known to deny a request of `cost` at `now`.
  // A reservation (`max_wait` > 0) is denied only when the denial lasts beyond
  // max_wait (+1 us of rounding slack): otherwise the store may grant it.
  bool Lookup(std::string_view key, std::uint64_t cost, Micros now, Decision* d,
              Micros max_wait = 0) {
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    const std::uint64_t h2 = Fnv1a64(key, kFnvOffsetAlt) | 1;  // 0 marks an empty slot
    Entry e;
    {
      std::lock_guard<std::mutex> lock(LockOf(h1));
      e = slots_.get()[h1 & mask_];
    }
    if (e.h1 != h1 || e.h2 != h2 || e.until <= now || cost < e.min_cost) return false;
    if (max_wait > 0 && e.until - now <= max_wait + 1) return false;
    *d = Decision{};
    d->allowed = false;
    d->limit = e.limit;
    d->remaining = e.remaining;
    d->retry_after = e.until - now;
    d->reset_after = std::max<Micros>(0, e.reset_at - now);
    d->source = DecisionSource::kDenyCache;
    return true;
  }

  void Insert(std::string_view key, std::uint64_t cost, Micros now, const Decision& d) {
    if (d.retry_after <= 0) return;
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    const std::uint64_t h2 = Fnv1a64(key, kFnvOffsetAlt) | 1;
    const Entry e{h1,
                  h2,
                  now + d.retry_after,
                  now + d.reset_after,
                  std::max<std::uint64_t>(cost, 1),
                  d.limit,
                  d.remaining,
                  0};
    std::lock_guard<std::mutex> lock(LockOf(h1));
    slots_.get()[h1 & mask_] = e;
  }

  void Erase(std::string_view key) {
    const std::uint64_t h1 = Fnv1a64(key, kFnvOffset);
    std::lock_guard<std::mutex> lock(LockOf(h1));
    Entry& e = slots_.get()[h1 & mask_];
    if (e.h1 == h1) e.until = 0;
  }

 private:
  struct Entry {
    std::uint64_t h1, h2;
    Micros until, reset_at;
    std::uint64_t min_cost, limit, remaining, pad;
  };
  static_assert(sizeof(Entry) == 64);
  struct Free {
    void operator()(Entry* p) const { std::free(p); }
  };
  std::mutex& LockOf(std::uint64_t h) { return locks_[(h >> 32) % locks_.size()]; }

  std::unique_ptr<Entry, Free> slots_;
  std::size_t mask_ = 0;
  std::array<std::mutex, 64> locks_;
};

}  // namespace

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

struct Decider::Impl {
  Options options;
  MemoryStore fallback_store;
  // The store serves its calls in this process (Store::InProcess, forwarded by
  // wrappers): one-check batches then take the fast path.
  bool in_process = false;
  bool use_deny_cache = false;
  DenyCache deny_cache;
  LeaseTable leases;
  std::array<CounterStripe, kCounterStripes> stripes;

  explicit Impl(Options o)
      : options(std::move(o)),
        fallback_store(MemoryStoreOptions{.max_keys = options.fallback_max_keys, .shards = 16}),
        in_process(options.store->InProcess() != nullptr),
        use_deny_cache(options.deny_cache && options.store->IsRemote()),
        deny_cache(use_deny_cache ? options.deny_cache_bytes : 0),
        leases(options.lease_max_keys) {}

  CounterStripe& Counters() { return stripes[ThisThreadStripe()]; }

  // One group (all enforced or all shadow) ready for the store.
  struct Group {
    Group() {}  // sc is filled by MakeGroup for the checks used, not zeroed per call
    union {
      StoreCheck sc[kMaxBatchChecks];
    };
    const Check* checks = nullptr;
    std::size_t n = 0;
    StoreOp op = StoreOp::kDecide;
    bool too_big = false;
  };

  // The store's view of `c` at `cost`.
  static StoreCheck ToStoreCheck(const Check& c, std::uint64_t cost) {
    return StoreCheck{
        .policy = c.policy, .key = c.key, .cost = cost, .permit = c.permit, .max_wait = c.max_wait};
  }

  // A decision's cost above its policy's capacity could never pass: the whole group
  // is then only peeked (AfterStore denies that check).
  static void MakeGroup(std::span<const Check> checks, Group& g, StoreOp op = StoreOp::kDecide) {
    g.checks = checks.data();
    g.n = checks.size();
    g.op = op;
    g.too_big = false;
    if (op == StoreOp::kDecide) {
      for (const Check& c : checks) {
        g.too_big = g.too_big || (c.policy != nullptr && c.cost > c.policy->Capacity());
      }
    }
    for (std::size_t i = 0; i < checks.size(); ++i) {
      g.sc[i] = ToStoreCheck(checks[i], g.too_big ? 0 : checks[i].cost);
    }
  }

  // The group as a store batch at `now`.
  static StoreBatch BatchOf(const Group& g, Micros now) {
    return StoreBatch{.op = g.op, .checks = std::span<const StoreCheck>(g.sc, g.n), .now = now};
  }

  // True (and fills `out`) when the deny cache decides the group: one known denial
  // decides an all-or-nothing batch.
  bool FromDenyCache(const Group& g, Micros now, std::span<Decision> out) {
    if (!use_deny_cache || g.too_big || g.op != StoreOp::kDecide) return false;
    for (std::size_t i = 0; i < g.n; ++i) {
      Decision d;
      if (!deny_cache.Lookup(g.sc[i].key, g.sc[i].cost, now, &d, ReservingWait(g.sc[i]))) {
        continue;
      }
      for (std::size_t j = 0; j < g.n; ++j) {
        const std::uint16_t idx = out[j].policy_index;
        if (j == i) {
          out[j] = d;
        } else {
          // Not asked: the limit as the caller knows it, nothing charged.
          out[j] = Decision{.allowed = true,
                            .limit = g.sc[j].policy->Capacity(),
                            .remaining = g.sc[j].policy->Capacity(),
                            .source = DecisionSource::kDenyCache};
        }
        out[j].policy_index = idx;
      }
      Counters().deny_cache_hits.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    return false;
  }

  // The max_wait a store applies to `c`: only token bucket and GCRA reserve future
  // budget (StoreCheck::max_wait); a window algorithm's denial holds for a reservation.
  static Micros ReservingWait(const StoreCheck& c) {
    const Algorithm a = c.policy->algorithm;
    return a == Algorithm::kTokenBucket || a == Algorithm::kGcra ? c.max_wait : 0;
  }

  // Turns the store's answer into the group's decisions: failures follow each check's
  // failure mode, denials feed the deny cache, and a check left uncharged because
  // another denied reports what really remains. `out` holds the store's decisions.
  Status AfterStore(const Group& g, const Status& s, Micros now, std::span<Decision> out) {
    if (!s.ok()) {
      if (s.code() == ErrorCode::kInvalidArgument) return s;
      Counters().store_errors.fetch_add(1, std::memory_order_relaxed);
      if (g.op == StoreOp::kRelease || g.op == StoreOp::kExtend) {
        return PermitOnFallback(g, s, now, out);
      }
      OnStoreFailure(g, now, out);
    } else {
      bool denied = false;
      for (std::size_t i = 0; i < g.n; ++i) denied = denied || !out[i].allowed;
      for (std::size_t i = 0; i < g.n; ++i) {
        if (!out[i].allowed) {
          // (A concurrency slot may be released before its retry time: not cached.)
          if (use_deny_cache && g.sc[i].policy->algorithm != Algorithm::kConcurrency) {
            deny_cache.Insert(g.sc[i].key, g.sc[i].cost, now, out[i]);
          }
        } else if (denied) {
          out[i].remaining = std::min(out[i].limit, out[i].remaining + g.sc[i].cost);
          out[i].wait = 0;  // not taken: no reservation to wait for
        }
      }
    }
    if (g.too_big) {
      for (std::size_t i = 0; i < g.n; ++i) {
        const Check& c = g.checks[i];
        if (c.cost <= c.policy->Capacity()) continue;
        out[i].allowed = false;
        out[i].remaining = 0;
        out[i].retry_after = c.policy->window;
      }
    }
    return Status::Ok();
  }

  // The store failed during a release or an extend (`s`): failure modes decide
  // admissions only, so the answer is `s`, never a claimed success or a false "not
  // held". The one exception is a permit the local fallback holds (taken while the
  // store was down): local-fallback checks are tried there, and when it holds the
  // permit that is the answer.
  Status PermitOnFallback(const Group& g, const Status& s, Micros now, std::span<Decision> out) {
    StoreCheck fb[kMaxBatchChecks];
    std::size_t fb_index[kMaxBatchChecks];
    std::size_t n = 0;
    for (std::size_t i = 0; i < g.n; ++i) {
      const Check& c = g.checks[i];
      if (c.policy->failure_mode != FailureMode::kLocalFallback) continue;
      fb[n] = g.sc[i];
      fb[n].policy = c.fallback != nullptr ? c.fallback : c.policy;
      fb_index[n++] = i;
    }
    if (n == 0) return s;
    Decision fd[kMaxBatchChecks];
    const Status fs = fallback_store.Run(
        StoreBatch{.op = g.op, .checks = std::span<const StoreCheck>(fb, n), .now = now},
        std::span<Decision>(fd, n));
    bool held = false;
    for (std::size_t k = 0; fs.ok() && k < n; ++k) held = held || fd[k].allowed;
    if (!held) return s;
    for (std::size_t i = 0; i < g.n; ++i) {
      const std::uint16_t idx = out[i].policy_index;
      out[i] = Decision{.allowed = false, .source = DecisionSource::kLocalFallback};
      out[i].policy_index = idx;
    }
    for (std::size_t k = 0; k < n; ++k) {
      Decision& d = out[fb_index[k]];
      const std::uint16_t idx = d.policy_index;
      d = fd[k];
      d.source = DecisionSource::kLocalFallback;
      d.policy_index = idx;
    }
    return Status::Ok();
  }

  // The store failed: each check follows its own failure mode. Fail-closed checks deny;
  // fail-open checks allow; local-fallback checks are decided together by the
  // in-process store, and only peeked when another check of the batch denies.
  void OnStoreFailure(const Group& g, Micros now, std::span<Decision> out) {
    bool closed = false, open = false;
    StoreCheck fb[kMaxBatchChecks];
    std::size_t fb_index[kMaxBatchChecks];
    std::size_t n = 0;
    for (std::size_t i = 0; i < g.n; ++i) {
      const Check& c = g.checks[i];
      const Policy& p = *c.policy;
      Decision& d = out[i];
      const std::uint16_t idx = d.policy_index;
      switch (p.failure_mode) {
        case FailureMode::kFailClosed:
          closed = true;
          d = Decision{};
          d.allowed = false;
          d.limit = p.Capacity();
          d.remaining = 0;
          d.retry_after = std::min<Micros>(p.window, 1'000'000);
          d.reset_after = d.retry_after;
          d.source = DecisionSource::kFailClosed;
          break;
        case FailureMode::kLocalFallback: {
          const Policy& fp = c.fallback != nullptr ? *c.fallback : p;
          if (g.sc[i].cost <= fp.Capacity()) {
            fb[n] = g.sc[i];
            fb[n].policy = &fp;
            fb_index[n++] = i;
            break;
          }
          d = Decision{.allowed = false,
                       .limit = fp.Capacity(),
                       .retry_after = p.window,
                       .source = DecisionSource::kLocalFallback};
          closed = true;
          break;
        }
        default:
          open = true;
          d = Decision{};
          d.allowed = true;
          d.limit = p.Capacity();
          d.remaining = p.Capacity() - std::min(p.Capacity(), g.sc[i].cost);
          d.source = DecisionSource::kFailOpen;
          break;
      }
      d.policy_index = idx;
    }
    if (closed) Counters().fail_closed.fetch_add(1, std::memory_order_relaxed);
    if (open) Counters().fail_open.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) return;
    Counters().local_fallback.fetch_add(1, std::memory_order_relaxed);
    if (closed) {
      for (std::size_t k = 0; k < n; ++k) fb[k].cost = 0;
    }
    Decision fd[kMaxBatchChecks];
    Status s = fallback_store.Run(
        StoreBatch{.op = g.op, .checks = std::span<const StoreCheck>(fb, n), .now = now},
        std::span<Decision>(fd, n));
    for (std::size_t k = 0; k < n; ++k) {
      Decision& d = out[fb_index[k]];
      const std::uint16_t idx = d.policy_index;
      if (s.ok()) {
        d = fd[k];
      } else {
        d = Decision{.allowed = false, .limit = fb[k].policy->Capacity(), .retry_after = 1'000'000};
      }
      d.source = DecisionSource::kLocalFallback;
      d.policy_index = idx;
    }
  }

  static void ClearDecisions(std::span<Decision> out) {
    for (Decision& d : out) {
      const std::uint16_t idx = d.policy_index;
      d = Decision{};
      d.policy_index = idx;
    }
  }

  Status EvaluateSync(std::span<const Check> checks, Micros now, std::span<Decision> out) {
    Group g;
    MakeGroup(checks, g);
    if (FromDenyCache(g, now, out)) return Status::Ok();
    // The store writes whole decisions: policy indices are restored after.
    std::uint16_t idx[kMaxBatchChecks];
    for (std::size_t i = 0; i < g.n; ++i) idx[i] = out[i].policy_index;
    ClearDecisions(out.first(g.n));
    Status s = options.store->Run(BatchOf(g, now), out.first(g.n));
    for (std::size_t i = 0; i < g.n; ++i) out[i].policy_index = idx[i];
    return AfterStore(g, s, now, out);
  }

  // A batch the lease table may decide: one enforced check of a leased policy, with a
  // cost below the lease bound (LeaseTable::Acquire answers kPlain otherwise).
  static bool LeaseEligible(std::span<const Check> checks) {
    if (checks.size() != 1) return false;
    const Check& c = checks[0];
    return c.policy->lease > 0 && !c.policy->shadow && c.cost >= 1 && c.cost < c.policy->lease &&
           c.max_wait == 0;  // reservations take future budget: always the store's
  }

  // Gives ended leases back, without waiting: a refund that fails leaves the units
  // taken (conservative), so there is nothing to do with its answer.
  void ReturnLeases(std::vector<LeaseReturn>& returns, Micros now) {
    for (LeaseReturn& r : returns) {
      Counters().lease_returns.fetch_add(1, std::memory_order_relaxed);
      const StoreCheck sc{.policy = &r.policy, .key = r.key, .cost = r.units};
      options.store->RunAsync(
          StoreBatch{
              .op = StoreOp::kRefund, .checks = std::span<const StoreCheck>(&sc, 1), .now = now},
          [](const Status&, std::span<const Decision>) {});
    }
    returns.clear();
  }

  // Tries the lease of checks[0] (LeaseEligible): kLocal fills out[0] (its
  // policy_index kept), kRefill asks for a lease of `grant` units.
  LeaseTable::Take LeaseAcquire(const Check& c, Micros now, std::span<Decision> out) {
    std::vector<LeaseReturn> returns;
    Decision local;
    const LeaseTable::Take t = leases.Acquire(c.key, *c.policy, c.cost, now, &local, &returns);
    if (!returns.empty()) ReturnLeases(returns, now);
    if (t.outcome == LeaseTable::Outcome::kLocal) {
      local.policy_index = out[0].policy_index;
      out[0] = local;
      Counters().lease_hits.fetch_add(1, std::memory_order_relaxed);
    }
    return t;
  }

  // The store answered a lease request of `grant` units for the single check of `gc`
  // (the group at the caller's cost) with `s` and out[0]. True when that decides the
  // request; false when it must be decided through the store at its own cost (the
  // lease was denied but a smaller cost may pass).
  bool AfterLease(const Group& gc, std::uint64_t grant, Micros now, const Status& s,
                  std::span<Decision> out) {
    const Check& c = gc.checks[0];
    if (!s.ok()) {
      leases.Failed(c.key);
      (void)AfterStore(gc, s, now, out);  // the failure mode, at the caller's cost
      return true;
    }
    if (out[0].allowed) {
      leases.Granted(c.key, *c.policy, grant, c.cost, now, out[0]);
      Counters().lease_grants.fetch_add(1, std::memory_order_relaxed);
      out[0].remaining += grant - c.cost;  // what the caller may still use, lease included
      return true;
    }
    leases.Denied(c.key, out[0].remaining);
    if (grant > c.cost) return false;
    (void)AfterStore(gc, s, now, out);  // a denial of the caller's own cost
    return true;
  }

  // The synchronous lease path: true when out[0] is decided, false for the usual path.
  bool DecideLeased(const Check& c, Micros now, std::span<Decision> out) {
    const LeaseTable::Take t = LeaseAcquire(c, now, out);
    if (t.outcome == LeaseTable::Outcome::kLocal) return true;
    if (t.outcome == LeaseTable::Outcome::kPlain) return false;
    Group gc;
    MakeGroup(std::span<const Check>(&c, 1), gc);
    if (FromDenyCache(gc, now, out)) {  // the caller's cost is known to be denied
      leases.Failed(c.key);
      return true;
    }
    const std::uint16_t idx = out[0].policy_index;
    ClearDecisions(out.first(1));
    const StoreCheck sc{.policy = c.policy, .key = c.key, .cost = t.grant};
    Status s = options.store->Run(
        StoreBatch{.checks = std::span<const StoreCheck>(&sc, 1), .now = now}, out.first(1));
    out[0].policy_index = idx;
    return AfterLease(gc, t.grant, now, s, out);
  }

  // Shadow rewrite, binding index and counters, once every group is decided.
  std::size_t Finish(std::span<const Check> checks, std::span<Decision> out) {
    bool shadowed = false;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      if (!out[i].allowed && checks[i].policy->shadow) {
        out[i].allowed = true;
        out[i].shadow_denied = true;
        out[i].retry_after = 0;
        shadowed = true;
      }
      if (checks[i].policy->shadow) out[i].wait = 0;  // shadow never delays a request
    }
    const std::size_t bind = BindingIndex(out.first(checks.size()));
    Counters().decisions.fetch_add(1, std::memory_order_relaxed);
    if (!out[bind].allowed) Counters().denied.fetch_add(1, std::memory_order_relaxed);
    if (shadowed) Counters().shadow_denied.fetch_add(1, std::memory_order_relaxed);
    return bind;
  }

  // The entry points' validation: the Decider's own arguments, then the batch the
  // store will see (ValidateBatch, the one validation of checks).
  static Status Validate(std::span<const Check> checks, std::size_t out_size, StoreOp op) {
    if (checks.empty()) return Status::InvalidArgument("no checks given");
    if (checks.size() > kMaxBatchChecks) {
      return Status::InvalidArgument("at most " + std::to_string(kMaxBatchChecks) +
                                     " checks per call (got " + std::to_string(checks.size()) +
                                     ")");
    }
    if (out_size < checks.size()) {
      return Status::InvalidArgument("per-check output has fewer slots than checks");
    }
    Group g;
    MakeGroup(checks, g, op);
    return ValidateBatch(BatchOf(g, 0));
  }
};

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

Result<std::size_t> Decider::Decide(std::span<const Check> checks, std::span<Decision> out) {
  Impl& im = *impl_;
  if (checks.size() == 1 && im.in_process && checks[0].policy != nullptr &&
      !checks[0].policy->shadow && checks[0].policy->lease == 0 &&
      checks[0].cost <= checks[0].policy->Capacity() && out.size() >= 1) {
    // One enforced check, without a lease, on an in-process store (the deny cache is off
    // for it): straight to the store, nothing copied or cleared. It goes through the
    // store the decider was given, so that wrappers still see the call (sluiced's
    // latency histogram and key-cap count); the store validates the check. A store
    // error takes the general path's handling.
    const Check& c = checks[0];
    const StoreCheck sc = Impl::ToStoreCheck(c, c.cost);
    const Micros now = im.options.clock->Now();
    const std::uint16_t idx = out[0].policy_index;
    const Status s = im.options.store->Run(
        StoreBatch{.checks = std::span<const StoreCheck>(&sc, 1), .now = now}, out.first(1));
    out[0].policy_index = idx;
    im.Counters().in_process.fetch_add(1, std::memory_order_relaxed);
    if (!s.ok()) {
      Impl::Group g;
      Impl::MakeGroup(checks, g);
      if (Status st = im.AfterStore(g, s, now, out); !st.ok()) return st;
    }
    return im.Finish(checks, out);
  }
  if (Status s = Impl::Validate(checks, out.size(), StoreOp::kDecide); !s.ok()) return s;
  const Micros now = im.options.clock->Now();
  // Shadow checks are decided in a batch of their own: a would-be denial by a shadow
  // policy must not stop the enforced ones from being charged (nor the other way
  // round). A request with no shadow policy, the usual case, is one batch.
  std::size_t shadow_count = 0;
  for (const Check& c : checks) shadow_count += c.policy->shadow ? 1 : 0;
  if (Impl::LeaseEligible(checks) && im.DecideLeased(checks[0], now, out)) {
    // decided from, or with, a lease
  } else if (shadow_count == 0 || shadow_count == checks.size()) {
    if (Status s = im.EvaluateSync(checks, now, out); !s.ok()) return s;
  } else {
    Check grouped[kMaxBatchChecks];
    Decision decided[kMaxBatchChecks];
    std::size_t from[kMaxBatchChecks];
    std::size_t n = 0;
    for (bool shadow : {false, true}) {
      for (std::size_t i = 0; i < checks.size(); ++i) {
        if (checks[i].policy->shadow != shadow) continue;
        grouped[n] = checks[i];
        decided[n] = out[i];
        from[n++] = i;
      }
    }
    const std::size_t enforced = checks.size() - shadow_count;
    for (auto [first, count] :
         {std::pair{std::size_t{0}, enforced}, std::pair{enforced, shadow_count}}) {
      Status s = im.EvaluateSync(std::span<const Check>(grouped + first, count), now,
                                 std::span<Decision>(decided + first, count));
      if (!s.ok()) return s;
    }
    for (std::size_t k = 0; k < n; ++k) out[from[k]] = decided[k];
  }
  return im.Finish(checks, out);
}

namespace {

// A batch in flight: owns copies of the keys and the checks, since the caller's
// views end when DecideAsync returns and the store may answer later.
struct Pending {
  std::shared_ptr<Decider::Impl> impl;
  std::string keys[kMaxBatchChecks];
  std::string permits[kMaxBatchChecks];  // concurrency limits: copies of the permit ids
  Check checks[kMaxBatchChecks];         // in caller order, keys pointing into `keys`
  Check grouped[kMaxBatchChecks];        // enforced first, then shadow
  std::size_t from[kMaxBatchChecks];     // grouped index -> caller index
  Decision decided[kMaxBatchChecks];     // grouped order
  std::size_t n = 0;
  std::size_t enforced = 0;
  Micros now = 0;
  StoreOp op = StoreOp::kDecide;
  DoneCallback done;
  Decider::Impl::Group group;
};

}  // namespace

// Runs the group [first, first+count) of `p` asynchronously, then the next group, then
// finishes. Each step owns `p` until it hands it on.
static void RunGroup(std::shared_ptr<Pending> p, std::size_t first, std::size_t count);

static void FinishPending(const std::shared_ptr<Pending>& p) {
  Decision out[kMaxBatchChecks];
  for (std::size_t k = 0; k < p->n; ++k) out[p->from[k]] = p->decided[k];
  const std::size_t bind =
      p->impl->Finish(std::span<const Check>(p->checks, p->n), std::span<Decision>(out, p->n));
  p->done(Status::Ok(), std::span<const Decision>(out, p->n), bind);
}

static void NextGroup(std::shared_ptr<Pending> p, std::size_t first, std::size_t count) {
  const std::size_t end = first + count;
  const std::size_t n = p->n;
  if (end < n) {
    RunGroup(std::move(p), end, n - end);
  } else {
    FinishPending(p);
  }
}

static void RunGroup(std::shared_ptr<Pending> p, std::size_t first, std::size_t count) {
  Decider::Impl& im = *p->impl;
  auto& g = p->group;
  Decider::Impl::MakeGroup(std::span<const Check>(p->grouped + first, count), g, p->op);
  std::span<Decision> out(p->decided + first, count);
  if (im.FromDenyCache(g, p->now, out)) {
    NextGroup(std::move(p), first, count);
    return;
  }
  Decider::Impl::ClearDecisions(out);
  Store& store = *im.options.store;
  const Micros now = p->now;
  store.RunAsync(Decider::Impl::BatchOf(g, now),
                 [p, first, count](const Status& s, std::span<const Decision> d) mutable {
                   std::span<Decision> out(p->decided + first, count);
                   if (s.ok()) {
                     for (std::size_t i = 0; i < count && i < d.size(); ++i) {
                       const std::uint16_t idx = out[i].policy_index;
                       out[i] = d[i];
                       out[i].policy_index = idx;
                     }
                   }
                   Status st = p->impl->AfterStore(p->group, s, p->now, out);
                   if (!st.ok()) {
                     p->done(st, {}, 0);
                     return;
                   }
                   NextGroup(std::move(p), first, count);
                 });
}

// The asynchronous lease path: a lease request of `grant` units for p's single check;
// a denied lease falls back to the check at its own cost.
static void RunLease(std::shared_ptr<Pending> p, std::uint64_t grant) {
  Decider::Impl& im = *p->impl;
  auto& g = p->group;
  Decider::Impl::MakeGroup(std::span<const Check>(p->grouped, 1), g);
  std::span<Decision> out(p->decided, 1);
  if (im.FromDenyCache(g, p->now, out)) {  // the caller's cost is known to be denied
    im.leases.Failed(p->keys[0]);
    FinishPending(p);
    return;
  }
  Decider::Impl::ClearDecisions(out);
  const StoreCheck sc{.policy = p->grouped[0].policy, .key = p->grouped[0].key, .cost = grant};
  const Micros now = p->now;
  im.options.store->RunAsync(StoreBatch{.checks = std::span<const StoreCheck>(&sc, 1), .now = now},
                             [p, grant](const Status& s, std::span<const Decision> d) mutable {
                               std::span<Decision> out(p->decided, 1);
                               if (s.ok() && !d.empty()) {
                                 const std::uint16_t idx = out[0].policy_index;
                                 out[0] = d[0];
                                 out[0].policy_index = idx;
                               }
                               if (p->impl->AfterLease(p->group, grant, p->now, s, out)) {
                                 FinishPending(p);
                               } else {
                                 RunGroup(std::move(p), 0, 1);
                               }
                             });
}

void Decider::DecideAsync(std::span<const Check> checks, DoneCallback done, StoreOp op) {
  if (Status s = Impl::Validate(checks, checks.size(), op); !s.ok()) {
    done(s, {}, 0);
    return;
  }
  std::uint64_t lease_grant = 0;
  const Micros now = impl_->options.clock->Now();
  if (op == StoreOp::kDecide && Impl::LeaseEligible(checks)) {
    // The hot path of a leased key: decided here, without copying the batch.
    Decision out[1];
    out[0].policy_index = 0;
    const LeaseTable::Take t = impl_->LeaseAcquire(checks[0], now, out);
    if (t.outcome == LeaseTable::Outcome::kLocal) {
      const std::size_t bind = impl_->Finish(checks, out);
      done(Status::Ok(), std::span<const Decision>(out, 1), bind);
      return;
    }
    if (t.outcome == LeaseTable::Outcome::kRefill) lease_grant = t.grant;
  }
  auto p = std::make_shared<Pending>();
  p->impl = impl_;
  p->done = std::move(done);
  p->n = checks.size();
  p->now = now;
  p->op = op;
  for (std::size_t i = 0; i < p->n; ++i) {
    p->keys[i].assign(checks[i].key);
    p->checks[i] = checks[i];
    p->checks[i].key = p->keys[i];
    if (!checks[i].permit.empty()) {
      p->permits[i].assign(checks[i].permit);
      p->checks[i].permit = p->permits[i];
    }
  }
  std::size_t k = 0;
  for (bool shadow : {false, true}) {
    for (std::size_t i = 0; i < p->n; ++i) {
      if (p->checks[i].policy->shadow != shadow) continue;
      p->grouped[k] = p->checks[i];
      p->decided[k] = Decision{};
      p->decided[k].policy_index = static_cast<std::uint16_t>(i);
      p->from[k++] = i;
    }
    if (!shadow) p->enforced = k;
  }
  if (lease_grant > 0) {
    RunLease(std::move(p), lease_grant);
  } else if (p->enforced == 0 || p->enforced == p->n) {
    RunGroup(std::move(p), 0, k);
  } else {
    const std::size_t enforced = p->enforced;
    RunGroup(std::move(p), 0, enforced);
  }
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
    s.decisions += c.decisions.load(std::memory_order_relaxed);
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
