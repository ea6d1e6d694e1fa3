// sluice::Permit (sluice/permit.h) and permit ids.
#include "sluice/permit.h"

#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "limiter/limiter_impl.h"
#include "limiter/limiter_internal.h"
#include "limiter/permit_internal.h"
#include "sluice/key.h"
#include "sluice/limiter.h"

namespace sluice {

namespace permit_internal {
namespace {

// xoshiro256** (public domain, Blackman and Vigna): fast, 256 bits of state.
struct Xoshiro {
  std::uint64_t s[4];
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t Next() {
    const std::uint64_t r = Rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = Rotl(s[3], 45);
    return r;
  }
};

}  // namespace

std::string NewPermitId() {
  thread_local Xoshiro rng{};
  thread_local pid_t seeded_for = -1;
  const pid_t pid = ::getpid();
  if (seeded_for != pid) {
    std::random_device rd;
    for (std::uint64_t& w : rng.s) {
      w = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }
    rng.s[0] ^= static_cast<std::uint64_t>(pid);
    if ((rng.s[0] | rng.s[1] | rng.s[2] | rng.s[3]) == 0) rng.s[0] = 1;
    seeded_for = pid;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(kPermitIdLength, '0');
  for (std::size_t w = 0; w < kPermitIdLength / 16; ++w) {
    std::uint64_t v = rng.Next();
    for (std::size_t i = 0; i < 16; ++i) {
      id[w * 16 + i] = kHex[v >> 60];
      v <<= 4;
    }
  }
  return id;
}

}  // namespace permit_internal

bool IsPermitId(std::string_view id) {
  if (id.size() != kPermitIdLength) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Permit::~Permit() {
  if (held_ && limiter_ != nullptr) {
    Status s = limiter_->PermitCall(*this, StoreOp::kRelease);
    // NotFound: it expired already (its slot is free); anything else is counted.
    if (!s.ok() && s.code() != ErrorCode::kNotFound) limiter_->CountReleaseError();
  }
}

Permit::Permit(Permit&& other) noexcept
    : limiter_(other.limiter_),
      key_(std::move(other.key_)),
      id_(std::move(other.id_)),
      decision_(other.decision_),
      slots_(std::move(other.slots_)),
      held_(other.held_) {
  other.held_ = false;
  other.slots_.clear();
}

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    Permit old(std::move(*this));  // released when `old` goes
    limiter_ = other.limiter_;
    key_ = std::move(other.key_);
    id_ = std::move(other.id_);
    decision_ = other.decision_;
    slots_ = std::move(other.slots_);
    held_ = other.held_;
    other.held_ = false;
    other.slots_.clear();
  }
  return *this;
}

Status Permit::Release() {
  if (!held_ || limiter_ == nullptr) {
    return Status::NotFound("permit '" + id_ + "' of key '" + key_ +
                            "' is not held (its acquisition was denied, or it was released, "
                            "detached or moved already)");
  }
  held_ = false;
  return limiter_->PermitCall(*this, StoreOp::kRelease);
}

Status Permit::Extend() {
  if (!held_ || limiter_ == nullptr) {
    return Status::NotFound("permit '" + id_ + "' of key '" + key_ +
                            "' is not held (its acquisition was denied, or it was released, "
                            "detached or moved already): it cannot be extended");
  }
  return limiter_->PermitCall(*this, StoreOp::kExtend);
}

std::string Permit::Detach() {
  if (!held_) return {};
  held_ = false;
  return id_;
}

using limiter_impl::kMaxChecks;
using limiter_impl::Scratch;
using limiter_internal::BuildStoreKey;

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
