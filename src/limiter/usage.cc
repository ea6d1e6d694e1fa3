// Limiter's usage reservations (issue #21 item 3): ReserveUsage takes an estimate and
// has the store record it under a new id; SettleUsage settles that id with the actual
// usage (StoreOp::kSettle), at most once.
#include <string>

#include "core/algorithms.h"
#include "limiter/limiter_impl.h"
#include "limiter/limiter_internal.h"
#include "limiter/permit_internal.h"
#include "sluice/key.h"
#include "sluice/permit_id.h"

namespace sluice {
namespace {

using limiter_impl::kMaxChecks;
using limiter_impl::Scratch;

// Every policy of the limiter checked for `key` at `cost`; InvalidArgument when one
// is a concurrency limit (it has no usage to settle).
Status AllPolicies(const std::vector<Policy>& ps, std::string_view key, std::uint64_t cost,
                   Check* out) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].algorithm == Algorithm::kConcurrency) {
      return Status::InvalidArgument("policy '" + ps[i].name +
                                     "' is a concurrency limit: usage reservations apply to "
                                     "rates only (name the checks instead)");
    }
    out[i] = Check{i, key, cost};
  }
  return Status::Ok();
}

}  // namespace

Result<UsageReservation> Limiter::ReserveUsage(std::string_view key, std::uint64_t estimate,
                                               Micros settle_within,
                                               std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  if (Status s = AllPolicies(ps, key, estimate, checks.data()); !s.ok()) return s;
  return ReserveUsage(std::span<const Check>(checks.data(), ps.size()), settle_within, per_policy);
}

Result<UsageReservation> Limiter::ReserveUsage(std::span<const Check> checks, Micros settle_within,
                                               std::span<Decision> per_check) {
  const Micros ttl = settle_within == 0 ? core::kDefaultUsageTtl : settle_within;
  if (ttl < core::kMinUsageTtl || ttl > core::kMaxUsageTtl) {
    return Status::InvalidArgument("settle_within must be 0 (15 minutes) or 1ms to 366 days (got " +
                                   std::to_string(settle_within) + "us)");
  }
  const auto& ps = impl_->options.policies;
  for (const Check& c : checks) {
    if (c.policy < ps.size() && ps[c.policy].algorithm == Algorithm::kConcurrency) {
      return Status::InvalidArgument("policy '" + ps[c.policy].name +
                                     "' is a concurrency limit: usage reservations apply to "
                                     "rates only");
    }
  }
  if (!per_check.empty() && per_check.size() < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  Scratch<Decision, kMaxChecks> local;
  const std::span<Decision> out = per_check.empty()
                                      ? std::span<Decision>(local.data(), checks.size())
                                      : per_check.first(checks.size());
  UsageReservation r;
  r.id = permit_internal::NewPermitId();
  auto bind = impl_->Decide(checks, 0, out, {}, r.id, ttl);
  if (!bind.ok()) return bind.status();
  r.decision = *bind;
  // A failure mode's decision recorded nothing in the store: nothing to settle.
  for (const Decision& d : out) {
    if (d.source != DecisionSource::kStore) r.id.clear();
  }
  return r;
}

Result<UsageSettlement> Limiter::SettleUsage(std::string_view key, std::string_view id,
                                             std::uint64_t actual, std::span<Decision> per_policy) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  if (Status s = AllPolicies(ps, key, actual, checks.data()); !s.ok()) return s;
  return SettleUsage(std::span<const Check>(checks.data(), ps.size()), id, per_policy);
}

Result<UsageSettlement> Limiter::SettleUsage(std::span<const Check> checks, std::string_view id,
                                             std::span<Decision> per_check) {
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks)
    return Status::InvalidArgument("at most " + std::to_string(kMaxChecks) + " checks per call");
  if (!IsPermitId(id)) {
    return Status::InvalidArgument("usage reservation id '" + std::string(id.substr(0, 64)) +
                                   "' must be " + std::to_string(kPermitIdLength) +
                                   " lower-case hex characters");
  }
  if (!per_check.empty() && per_check.size() < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  const auto& ps = impl_->options.policies;
  std::string keys[kMaxChecks];
  StoreCheck sc[kMaxChecks];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (c.policy >= ps.size()) {
      return Status::InvalidArgument("check names policy index " + std::to_string(c.policy) +
                                     " but the limiter has " + std::to_string(ps.size()));
    }
    if (c.key.empty() || c.key.size() > kMaxKeyBytes) {
      return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
    }
    const Policy& p = ps[c.policy];
    limiter_internal::BuildStoreKey(keys[i], impl_->options.key_prefix, c.key, p.name);
    sc[i] = StoreCheck{.policy = &p, .key = keys[i], .cost = c.cost, .usage_id = id};
  }
  Scratch<Decision, kMaxChecks> local;
  const std::span<Decision> out = per_check.empty()
                                      ? std::span<Decision>(local.data(), checks.size())
                                      : per_check.first(checks.size());
  for (Decision& d : out) d = Decision{};
  // (ValidateBatch, in the store, checks each actual usage against MaxCost().)
  Status s =
      impl_->options.store->Run(StoreBatch{.op = StoreOp::kSettle,
                                           .checks = std::span<const StoreCheck>(sc, checks.size()),
                                           .now = impl_->options.clock->Now()},
                                out);
  if (!s.ok()) return s;
  UsageSettlement r;
  r.already_settled = true;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    r.already_settled = r.already_settled && !out[i].allowed;
    out[i].policy_index = static_cast<std::uint16_t>(checks[i].policy);
    impl_->decider.ForgetDenial(keys[i]);  // budget may have come back
  }
  std::size_t bind = 0;  // the policy with the least remaining (StoreOp::kSettle's decisions)
  for (std::size_t i = 1; i < checks.size(); ++i) {
    if (out[i].remaining < out[bind].remaining) bind = i;
  }
  r.decision = out[bind];
  return r;
}

}  // namespace sluice
