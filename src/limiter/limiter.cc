// Limiter: policies, keys and costs in; it validates them, builds the store keys and
// hands the batch to its Decider (decide/decider.h), which owns the deny cache,
// failure modes, shadow mode and counters.
#include "sluice/limiter.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "core/key_escape.h"
#include "decide/decider.h"
#include "limiter/limiter_impl.h"
#include "limiter/limiter_internal.h"
#include "limiter/permit_internal.h"
#include "sluice/key.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

using limiter_impl::kMaxChecks;
using limiter_impl::Scratch;

bool ValidPrefix(std::string_view p) {
  if (p.empty() || p.size() > 64) return false;
  for (char c : p) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

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
                                       std::span<Decision> per_check, std::string_view permit,
                                       std::string_view usage_id, Micros usage_ttl) {
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
    if (c.cost > p.MaxCost() && !(permit.size() > 0 && p.algorithm == Algorithm::kConcurrency)) {
      if (p.overage != Overage::kReject) {
        return Status::InvalidArgument("cost " + std::to_string(c.cost) + " of policy '" + p.name +
                                       "' (overage " + OverageName(p.overage) + ") exceeds " +
                                       std::to_string(p.MaxCost()) +
                                       ", the most one check may charge");
      }
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
    // Built in place: assigning a temporary (`dchecks[i] = decide::Check{...}`) had GCC
    // fill the temporary with 8-byte stores and copy it with 16-byte loads, which the
    // CPU cannot forward from its store buffer (each waits for the stores to reach the
    // cache): about 10 % of a hot-set decision (docs/benchmarks.md, "store-forwarding
    // stalls").
    static_assert(std::is_trivially_destructible_v<decide::Check>, "built over the old one");
    new (&dchecks[i])
        decide::Check{.policy = &p,
                      .fallback = &fallback_policies[c.policy],
                      .key = BuildStoreKeyView(keys[i], options.key_prefix, c.key, p.name),
                      .cost = c.cost,
                      .max_wait = max_wait,
                      .usage_id = usage_id,
                      .usage_ttl = usage_ttl};
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

LimiterStats Limiter::Stats() const {
  LimiterStats s = impl_->decider.Stats();
  s.permit_release_errors = impl_->permit_release_errors.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice
