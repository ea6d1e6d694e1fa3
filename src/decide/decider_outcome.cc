// The decision layer's steps shared by every entry point (decider_impl.h): groups, the
// deny cache, what the store's answer or its failure makes of the decisions (failure
// modes, the local fallback), leases, and the shadow rewrite and counters at the end.
#include <algorithm>
#include <string>

#include "decide/decider_impl.h"

namespace sluice::decide {
namespace {

// The max_wait a store applies to `c`: only token bucket and GCRA reserve future
// budget (StoreCheck::max_wait); a window algorithm's denial holds for a reservation.
Micros ReservingWait(const StoreCheck& c) {
  const Algorithm a = c.policy->algorithm;
  return a == Algorithm::kTokenBucket || a == Algorithm::kGcra ? c.max_wait : 0;
}

}  // namespace

std::size_t ThisThreadStripe() {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % kCounterStripes;
  return stripe;
}

void Decider::Impl::MakeGroup(std::span<const Check> checks, Group& g, StoreOp op) {
  g.checks = checks.data();
  g.n = checks.size();
  g.op = op;
  g.too_big = false;
  if (op == StoreOp::kDecide) {
    for (const Check& c : checks) {
      // A cost no request could ever pay (above what the policy's overage lets it
      // take) is denied without charging anything; under an overage a report of more
      // than the capacity is charged, so it goes to the store whole.
      g.too_big = g.too_big || (c.policy != nullptr && c.cost > c.policy->MaxCost());
    }
  }
  for (std::size_t i = 0; i < checks.size(); ++i) {
    g.sc[i] = ToStoreCheck(checks[i], g.too_big ? 0 : checks[i].cost);
  }
}

bool Decider::Impl::FromDenyCache(const Group& g, Micros now, std::span<Decision> out) {
  if (!use_deny_cache || g.too_big || g.op != StoreOp::kDecide) return false;
  // A check the store must see whatever it decides: an overage charge, or a usage
  // reservation it records.
  for (std::size_t i = 0; i < g.n; ++i) {
    const StoreCheck& c = g.sc[i];
    if ((c.cost > 0 && c.policy->overage != Overage::kReject) || !c.usage_id.empty()) return false;
    if (g.checks[i].skip_deny_cache) return false;
  }
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

Status Decider::Impl::AfterStore(const Group& g, const Status& s, Micros now,
                                 std::span<Decision> out) {
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
        if (use_deny_cache && g.sc[i].policy->algorithm != Algorithm::kConcurrency &&
            !g.checks[i].skip_deny_cache) {
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
      if (c.cost <= c.policy->MaxCost()) continue;
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
Status Decider::Impl::PermitOnFallback(const Group& g, const Status& s, Micros now,
                                       std::span<Decision> out) {
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
void Decider::Impl::OnStoreFailure(const Group& g, Micros now, std::span<Decision> out) {
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

void Decider::Impl::ClearDecisions(std::span<Decision> out) {
  for (Decision& d : out) {
    const std::uint16_t idx = d.policy_index;
    d = Decision{};
    d.policy_index = idx;
  }
}

void Decider::Impl::ReturnLeases(std::vector<LeaseReturn>& returns, Micros now) {
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

LeaseTable::Take Decider::Impl::LeaseAcquire(const Check& c, Micros now, std::span<Decision> out) {
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

bool Decider::Impl::AfterLease(const Group& gc, std::uint64_t grant, Micros now, const Status& s,
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

std::size_t Decider::Impl::Finish(std::span<const Check> checks, std::span<Decision> out,
                                  bool in_process) {
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
  CounterStripe& c = Counters();
  (in_process ? c.in_process : c.decisions).fetch_add(1, std::memory_order_relaxed);
  if (!out[bind].allowed) c.denied.fetch_add(1, std::memory_order_relaxed);
  if (shadowed) c.shadow_denied.fetch_add(1, std::memory_order_relaxed);
  return bind;
}

Status Decider::Impl::Validate(std::span<const Check> checks, std::size_t out_size, StoreOp op) {
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxBatchChecks) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxBatchChecks) +
                                   " checks per call (got " + std::to_string(checks.size()) + ")");
  }
  if (out_size < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  Group g;
  MakeGroup(checks, g, op);
  return ValidateBatch(BatchOf(g, 0));
}

}  // namespace sluice::decide
