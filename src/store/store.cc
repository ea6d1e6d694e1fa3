// The store protocol's one validation (ValidateBatch) and Store's default RunAsync.
#include "sluice/store.h"

#include <string>

#include "core/algorithms.h"
#include "sluice/permit_id.h"

namespace sluice {
namespace {

const char* OpName(StoreOp op) {
  switch (op) {
    case StoreOp::kDecide:
      return "decision";
    case StoreOp::kRefund:
      return "refund";
    case StoreOp::kPenalize:
      return "penalty";
    case StoreOp::kRelease:
      return "release";
    case StoreOp::kExtend:
      return "extend";
    case StoreOp::kSettle:
      return "settle";
  }
  return "operation";
}

std::string Quoted(const Policy& p) {
  return "policy '" + p.name + "'";
}

// The permit of a concurrency check (kDecide with a cost, kRelease, kExtend).
Status ValidatePermit(const StoreCheck& c) {
  core::PermitId id;
  if (core::ParsePermitId(c.permit, &id)) return Status::Ok();
  return Status::InvalidArgument("permit id '" + std::string(c.permit.substr(0, 64)) +
                                 "' of concurrency " + Quoted(*c.policy) + " must be " +
                                 std::to_string(kPermitIdLength) + " lower-case hex characters");
}

// The errors below are built out of line and marked cold: a valid check, the decision
// path's case, then costs a few compares, with the validators inlined into
// ValidateBatch.
[[gnu::cold, gnu::noinline]] Status CostError(const StoreCheck& c) {
  const Policy& p = *c.policy;
  if (p.overage == Overage::kReject) {
    return Status::InvalidArgument("cost " + std::to_string(c.cost) + " exceeds the capacity " +
                                   std::to_string(p.Capacity()) + " of " + Quoted(p) +
                                   ": such a request could never pass");
  }
  return Status::InvalidArgument("cost " + std::to_string(c.cost) + " of " + Quoted(p) +
                                 " (overage " + OverageName(p.overage) + ") exceeds " +
                                 std::to_string(p.MaxCost()) + ", the most one check may charge");
}

// The cost of a kDecide or kSettle check: up to the capacity, or under an overage up
// to Policy::MaxCost().
Status ValidateCost(const StoreCheck& c) {
  if (c.cost <= c.policy->MaxCost()) [[likely]]
    return Status::Ok();
  return CostError(c);
}

// A usage reservation's id and record lifetime (kDecide with an id, kSettle).
[[gnu::cold, gnu::noinline]] Status UsageError(StoreOp op, const StoreCheck& c) {
  const Policy& p = *c.policy;
  if (!IsPermitId(c.usage_id)) {
    return Status::InvalidArgument(
        "usage reservation id '" + std::string(c.usage_id.substr(0, 64)) + "' of " + Quoted(p) +
        " must be " + std::to_string(kPermitIdLength) + " lower-case hex characters");
  }
  if (p.algorithm == Algorithm::kConcurrency) {
    return Status::InvalidArgument(
        Quoted(p) + " is a concurrency limit: usage reservations apply to rates only");
  }
  if (op == StoreOp::kSettle) return Status::Ok();
  if (c.max_wait != 0) {
    return Status::InvalidArgument("a usage reservation of " + Quoted(p) +
                                   " cannot wait (max_wait must be 0)");
  }
  if (c.usage_ttl < core::kMinUsageTtl || c.usage_ttl > core::kMaxUsageTtl) {
    return Status::InvalidArgument("usage reservation of " + Quoted(p) +
                                   " must be kept 1ms to 366 days (got " +
                                   std::to_string(c.usage_ttl) + "us)");
  }
  return Status::Ok();
}

Status ValidateUsage(StoreOp op, const StoreCheck& c) {
  if (c.usage_id.empty() && op == StoreOp::kDecide) [[likely]]
    return Status::Ok();
  return UsageError(op, c);
}

// A kDecide check's max_wait and permit (ValidateDecide, past its common case).
[[gnu::noinline]] Status ValidateWaitAndPermit(const StoreCheck& c) {
  const Policy& p = *c.policy;
  if (c.max_wait < 0 || c.max_wait > p.window) {
    return Status::InvalidArgument("max_wait " + std::to_string(c.max_wait) + "us of " + Quoted(p) +
                                   " must be 0 to its window (" + std::to_string(p.window) + "us)");
  }
  if (c.max_wait != 0 && p.overage != Overage::kReject) {
    return Status::InvalidArgument(Quoted(p) + " has overage " + OverageName(p.overage) +
                                   ": a reservation that waits (max_wait) needs overage reject");
  }
  if (p.algorithm != Algorithm::kConcurrency || c.cost == 0) return Status::Ok();  // a peek
  if (c.cost != 1) {
    return Status::InvalidArgument("a permit of concurrency " + Quoted(p) +
                                   " takes one slot: cost must be 1 (or 0 to peek), got " +
                                   std::to_string(c.cost));
  }
  return ValidatePermit(c);
}

Status ValidateDecide(const StoreCheck& c) {
  if (Status s = ValidateCost(c); !s.ok()) return s;
  if (Status s = ValidateUsage(StoreOp::kDecide, c); !s.ok()) return s;
  // A plain decision: no wait, and no permit (not a concurrency limit, or a peek).
  if (c.max_wait == 0 && (c.policy->algorithm != Algorithm::kConcurrency || c.cost == 0))
      [[likely]] {
    return Status::Ok();
  }
  return ValidateWaitAndPermit(c);
}

// A check without a policy or a key.
[[gnu::cold, gnu::noinline]] Status MissingError(StoreOp op, const StoreCheck& c) {
  if (c.policy == nullptr) {
    return Status::InvalidArgument(std::string("a check of a ") + OpName(op) + " has no policy");
  }
  return Status::InvalidArgument("a check of " + Quoted(*c.policy) + " has an empty key");
}

Status ValidateCheck(StoreOp op, const StoreCheck& c) {
  if (c.policy == nullptr || c.key.empty()) [[unlikely]]
    return MissingError(op, c);
  const Policy& p = *c.policy;
  const bool concurrency = p.algorithm == Algorithm::kConcurrency;
  switch (op) {
    case StoreOp::kDecide:
      return ValidateDecide(c);
    case StoreOp::kRefund:
    case StoreOp::kPenalize:
      if (op == StoreOp::kPenalize && concurrency) {
        return Status::InvalidArgument(Quoted(p) +
                                       " is a concurrency limit: penalties apply to rates only");
      }
      if (c.cost == 0 || c.cost > p.Capacity()) {
        return Status::InvalidArgument(std::string(OpName(op)) + " cost " + std::to_string(c.cost) +
                                       " of " + Quoted(p) + " must be 1-" +
                                       std::to_string(p.Capacity()));
      }
      return Status::Ok();
    case StoreOp::kSettle:
      if (Status s = ValidateCost(c); !s.ok()) return s;
      return ValidateUsage(op, c);
    case StoreOp::kRelease:
    case StoreOp::kExtend:
      if (!concurrency) {
        return Status::InvalidArgument(
            Quoted(p) + " is not a concurrency limit: it has no permits to release or extend");
      }
      return ValidatePermit(c);
  }
  return Status::InvalidArgument("unknown store operation " + std::to_string(static_cast<int>(op)));
}

}  // namespace

Status ValidateBatch(const StoreBatch& batch) {
  if (batch.checks.size() > kMaxBatchChecks) {
    return Status::InvalidArgument("at most " + std::to_string(kMaxBatchChecks) +
                                   " checks in one " + OpName(batch.op) + " (got " +
                                   std::to_string(batch.checks.size()) + ")");
  }
  for (const StoreCheck& c : batch.checks) {
    if (Status s = ValidateCheck(batch.op, c); !s.ok()) return s;
  }
  return Status::Ok();
}

Status Store::RunOne(const StoreCheck& check, const Clock& clock, Decision* out) {
  return Run(StoreBatch{.checks = std::span<const StoreCheck>(&check, 1), .now = clock.Now()},
             std::span<Decision>(out, 1));
}

void Store::RunAsync(const StoreBatch& batch, RunCallback done) {
  Decision out[kMaxBatchChecks];
  if (batch.checks.size() > kMaxBatchChecks) {
    done(ValidateBatch(batch), {});
    return;
  }
  const std::size_t n = batch.op == StoreOp::kRefund ? 0 : batch.checks.size();
  Status s = Run(batch, std::span<Decision>(out, n));
  done(s, std::span<const Decision>(out, s.ok() ? n : 0));
}

}  // namespace sluice
