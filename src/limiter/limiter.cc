// Limiter: keys, costs and policies in; one atomic store call; failure policy,
// shadow mode and the local deny cache around it.
#include "sluice/limiter.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "limiter/limiter_internal.h"
#include "sluice/key.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

constexpr std::size_t kMaxChecks = 16;

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

// Which bytes AppendEscaped (sluice/key.h) leaves as they are: [A-Za-z0-9._@/+=-].
constexpr std::array<bool, 256> kPlainByte = [] {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (char c : std::string_view("._-@/+=")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

// Counters of one stripe: threads add to their own stripe (one cache line), so that
// counting decisions does not bounce a shared line between cores.
struct alignas(64) CounterStripe {
  std::atomic<std::uint64_t> decisions{0}, denied{0}, shadow_denied{0}, deny_cache_hits{0},
      store_errors{0}, fail_open{0}, fail_closed{0}, local_fallback{0};
};
constexpr std::size_t kCounterStripes = 16;

std::size_t ThisThreadStripe() {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % kCounterStripes;
  return stripe;
}

std::uint64_t Fnv(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A bounded, direct-mapped cache of keys known to be denied until a time. A
// collision overwrites (forgetting a denial only costs one store call).
class DenyCache {
 public:
  explicit DenyCache(std::size_t entries) {
    std::size_t n = 16;
    while (n < entries) n <<= 1;
    slots_ = std::vector<Entry>(n);
  }

  // True (and fills `d`) when `key` is known to deny a request of `cost` at `now`.
  bool Lookup(std::string_view key, std::uint64_t cost, Micros now, Decision* d) {
    const std::uint64_t h = Fnv(key);
    Entry& e = slots_[h & (slots_.size() - 1)];
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.hash != h || e.until <= now || cost < e.min_cost || e.key != key) return false;
    *d = e.decision;
    d->retry_after = e.until - now;
    d->reset_after = std::max<Micros>(0, e.reset_at - now);
    d->source = DecisionSource::kDenyCache;
    return true;
  }

  void Insert(std::string_view key, std::uint64_t cost, Micros now, const Decision& d) {
    if (d.retry_after <= 0) return;
    const std::uint64_t h = Fnv(key);
    Entry& e = slots_[h & (slots_.size() - 1)];
    std::lock_guard<std::mutex> lock(e.mu);
    e.hash = h;
    e.key.assign(key.data(), key.size());
    e.until = now + d.retry_after;
    e.reset_at = now + d.reset_after;
    e.min_cost = std::max<std::uint64_t>(cost, 1);
    e.decision = d;
  }

  void Erase(std::string_view key) {
    const std::uint64_t h = Fnv(key);
    Entry& e = slots_[h & (slots_.size() - 1)];
    std::lock_guard<std::mutex> lock(e.mu);
    if (e.hash == h && e.key == key) e.until = 0;
  }

 private:
  struct Entry {
    std::mutex mu;
    std::uint64_t hash = 0;
    std::string key;
    Micros until = 0;
    Micros reset_at = 0;
    std::uint64_t min_cost = 1;
    Decision decision;
  };
  std::vector<Entry> slots_;
};

// A policy scaled down for one of `fallback_divisor` servers.
Policy FallbackPolicy(const Policy& p) {
  Policy f = p;
  const std::uint64_t d = p.fallback_divisor;
  f.limit = std::max<std::uint64_t>(1, (p.limit + d - 1) / d);
  if (p.burst != 0) f.burst = std::max<std::uint64_t>(1, (p.burst + d - 1) / d);
  if (p.initial_tokens) f.initial_tokens = std::min(*p.initial_tokens, f.Capacity());
  return f;
}

}  // namespace

namespace limiter_internal {

void BuildStoreKey(std::string& out, std::string_view prefix, std::string_view key,
                   std::string_view policy) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const std::size_t longest = prefix.size() + 2 + 3 * key.size() + 2 + policy.size();
  if (out.size() < longest) out.resize(longest);
  char* p = out.data();
  std::memcpy(p, prefix.data(), prefix.size());
  p += prefix.size();
  *p++ = ':';
  *p++ = '{';
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (kPlainByte[c]) {
      *p++ = ch;
    } else {
      p[0] = '%';
      p[1] = kHex[c >> 4];
      p[2] = kHex[c & 15];
      p += 3;
    }
  }
  *p++ = '}';
  *p++ = ':';
  std::memcpy(p, policy.data(), policy.size());
  p += policy.size();
  out.resize(static_cast<std::size_t>(p - out.data()));
}

}  // namespace limiter_internal

using limiter_internal::BuildStoreKey;

struct Limiter::Impl {
  LimiterOptions options;
  std::vector<Policy> fallback_policies;
  MemoryStore fallback_store;
  bool use_deny_cache = false;
  DenyCache deny_cache;

  std::array<CounterStripe, kCounterStripes> stripes;

  CounterStripe& Counters() { return stripes[ThisThreadStripe()]; }

  explicit Impl(LimiterOptions o)
      : options(std::move(o)),
        fallback_store(MemoryStoreOptions{.max_keys = 1 << 20, .shards = 16}),
        deny_cache(options.deny_cache_max_keys) {
    for (const Policy& p : options.policies) fallback_policies.push_back(FallbackPolicy(p));
    use_deny_cache = options.deny_cache && options.store->IsRemote();
  }

  Result<Decision> Decide(std::span<const StoreCheck> checks, std::span<Decision> out);
  // Deny cache, then one atomic store call; store failures become the failure modes'
  // decisions. Fills `out`; errors only for invalid arguments.
  Status Evaluate(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out);
  void OnStoreFailure(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out);
};

Result<std::unique_ptr<Limiter>> Limiter::Create(LimiterOptions options) {
  if (options.policies.empty()) return Status::InvalidArgument("at least one policy is required");
  if (options.policies.size() > kMaxChecks) {
    return Status::InvalidArgument("at most 16 policies per limiter (got " +
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
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks) return Status::InvalidArgument("at most 16 checks per call");
  if (!per_check.empty() && per_check.size() < checks.size()) {
    return Status::InvalidArgument("per-check output has fewer slots than checks");
  }
  const auto& ps = impl_->options.policies;
  thread_local std::string keys[kMaxChecks];
  Scratch<StoreCheck, kMaxChecks> store_checks;
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
    if (c.cost > p.Capacity()) {
      return Status::InvalidArgument("cost " + std::to_string(c.cost) + " exceeds the capacity " +
                                     std::to_string(p.Capacity()) + " of policy '" + p.name +
                                     "': such a request could never pass");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (checks[j].policy == c.policy && checks[j].key == c.key) {
        return Status::InvalidArgument("policy '" + p.name + "' is checked twice for one key");
      }
    }
    BuildStoreKey(keys[i], impl_->options.key_prefix, c.key, p.name);
    store_checks[i] = StoreCheck{&p, keys[i], c.cost};
  }
  Scratch<Decision, kMaxChecks> local;
  std::span<Decision> out = per_check.empty() ? std::span<Decision>(local.data(), checks.size())
                                              : per_check.first(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    out[i] = Decision{};
    out[i].policy_index = static_cast<std::uint16_t>(checks[i].policy);
  }
  return impl_->Decide(std::span<const StoreCheck>(store_checks.data(), checks.size()), out);
}

void Limiter::Impl::OnStoreFailure(std::span<const StoreCheck> checks, Micros now,
                                   std::span<Decision> out) {
  bool closed = false;
  for (const StoreCheck& c : checks)
    closed = closed || c.policy->failure_mode == FailureMode::kFailClosed;
  if (closed) {
    Counters().fail_closed.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const Policy& p = *checks[i].policy;
      Decision& d = out[i];
      d.allowed = false;
      d.limit = p.Capacity();
      d.remaining = 0;
      d.retry_after = std::min<Micros>(p.window, 1'000'000);
      d.reset_after = d.retry_after;
      d.source = DecisionSource::kFailClosed;
    }
    return;
  }
  // Fallback checks are decided together by the in-process store; the others open.
  StoreCheck fb[kMaxChecks];
  std::size_t fb_index[kMaxChecks];
  std::size_t n = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Policy& p = *checks[i].policy;
    Decision& d = out[i];
    if (p.failure_mode == FailureMode::kLocalFallback) {
      const Policy& fp = fallback_policies[d.policy_index];
      if (checks[i].cost <= fp.Capacity()) {
        fb[n] = StoreCheck{&fp, checks[i].key, checks[i].cost};
        fb_index[n++] = i;
        continue;
      }
      d = Decision{.allowed = false,
                   .limit = fp.Capacity(),
                   .retry_after = p.window,
                   .source = DecisionSource::kLocalFallback,
                   .policy_index = d.policy_index};
      continue;
    }
    const std::uint16_t idx = d.policy_index;
    d = Decision{};
    d.allowed = true;
    d.limit = p.Capacity();
    d.remaining = p.Capacity() - std::min(p.Capacity(), checks[i].cost);
    d.source = DecisionSource::kFailOpen;
    d.policy_index = idx;
  }
  if (n < checks.size()) Counters().fail_open.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) return;
  Counters().local_fallback.fetch_add(1, std::memory_order_relaxed);
  Decision fd[kMaxChecks];
  Status s =
      fallback_store.Evaluate(std::span<const StoreCheck>(fb, n), now, std::span<Decision>(fd, n));
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

Status Limiter::Impl::Evaluate(std::span<const StoreCheck> checks, Micros now,
                               std::span<Decision> out) {
  bool cached = false;
  if (use_deny_cache) {
    for (std::size_t i = 0; i < checks.size(); ++i) {
      Decision d;
      if (deny_cache.Lookup(checks[i].key, checks[i].cost, now, &d)) {
        // One known denial decides the whole (all-or-nothing) batch.
        for (std::size_t j = 0; j < checks.size(); ++j) {
          const std::uint16_t idx = out[j].policy_index;
          if (j == i) {
            out[j] = d;
          } else {
            out[j] = Decision{.allowed = true,
                              .limit = checks[j].policy->Capacity(),
                              .source = DecisionSource::kDenyCache};
          }
          out[j].policy_index = idx;
        }
        cached = true;
        Counters().deny_cache_hits.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  }
  if (!cached) {
    // The store writes straight into `out`, each entry reset first; policy indices
    // are restored after.
    std::uint16_t idx[kMaxChecks];
    for (std::size_t i = 0; i < checks.size(); ++i) {
      idx[i] = out[i].policy_index;
      out[i] = Decision{};
      out[i].policy_index = idx[i];
    }
    Status s = options.store->Evaluate(checks, now, out.first(checks.size()));
    for (std::size_t i = 0; i < checks.size(); ++i) out[i].policy_index = idx[i];
    if (!s.ok()) {
      if (s.code() == ErrorCode::kInvalidArgument) return s;
      Counters().store_errors.fetch_add(1, std::memory_order_relaxed);
      OnStoreFailure(checks, now, out);
    } else if (use_deny_cache) {
      for (std::size_t i = 0; i < checks.size(); ++i) {
        if (!out[i].allowed) deny_cache.Insert(checks[i].key, checks[i].cost, now, out[i]);
      }
    }
  }
  return Status::Ok();
}

Result<Decision> Limiter::Impl::Decide(std::span<const StoreCheck> checks,
                                       std::span<Decision> out) {
  const Micros now = options.clock->Now();
  // Shadow policies are decided in a batch of their own: a would-be denial by a
  // shadow policy must not stop the enforced policies from being charged (nor the
  // other way round). A request with no shadow policy, the usual case, is one batch.
  std::size_t shadow_count = 0;
  for (const StoreCheck& c : checks) shadow_count += c.policy->shadow ? 1 : 0;
  if (shadow_count == 0 || shadow_count == checks.size()) {
    if (Status s = Evaluate(checks, now, out); !s.ok()) return s;
  } else {
    StoreCheck grouped[kMaxChecks];
    Decision decided[kMaxChecks];
    std::size_t from[kMaxChecks];
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
      Status s = Evaluate(std::span<const StoreCheck>(grouped + first, count), now,
                          std::span<Decision>(decided + first, count));
      if (!s.ok()) return s;
    }
    for (std::size_t k = 0; k < n; ++k) out[from[k]] = decided[k];
  }

  bool shadowed = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (!out[i].allowed && checks[i].policy->shadow) {
      out[i].allowed = true;
      out[i].shadow_denied = true;
      out[i].retry_after = 0;
      shadowed = true;
    }
  }
  // The binding decision: a denial with the longest wait, else the least remaining.
  std::size_t bind = 0;
  bool any_denied = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Decision& d = out[i];
    if (!d.allowed) {
      if (!any_denied || d.retry_after > out[bind].retry_after) bind = i;
      any_denied = true;
    } else if (!any_denied && d.remaining < out[bind].remaining) {
      bind = i;
    }
  }
  Counters().decisions.fetch_add(1, std::memory_order_relaxed);
  if (any_denied) Counters().denied.fetch_add(1, std::memory_order_relaxed);
  if (shadowed) Counters().shadow_denied.fetch_add(1, std::memory_order_relaxed);
  return out[bind];
}

Status Limiter::Refund(std::string_view key, std::uint64_t cost) {
  const auto& ps = impl_->options.policies;
  Scratch<Check, kMaxChecks> checks;
  for (std::size_t i = 0; i < ps.size(); ++i) checks[i] = Check{i, key, cost};
  return Refund(std::span<const Check>(checks.data(), ps.size()));
}

Status Limiter::Refund(std::span<const Check> checks) {
  if (checks.empty()) return Status::InvalidArgument("no checks given");
  if (checks.size() > kMaxChecks) return Status::InvalidArgument("at most 16 checks per call");
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
    if (c.cost == 0 || c.cost > p.Capacity()) {
      return Status::InvalidArgument("refund cost " + std::to_string(c.cost) + " of policy '" +
                                     p.name + "' must be 1-" + std::to_string(p.Capacity()));
    }
    BuildStoreKey(keys[i], impl_->options.key_prefix, c.key, p.name);
    store_checks[i] = StoreCheck{&p, keys[i], c.cost};
  }
  Status s = impl_->options.store->Refund(std::span<const StoreCheck>(store_checks, checks.size()),
                                          impl_->options.clock->Now());
  // A key denied until later may pass now that budget came back.
  for (std::size_t i = 0; s.ok() && i < checks.size(); ++i) impl_->deny_cache.Erase(keys[i]);
  return s;
}

Status Limiter::Reset(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key must be 1-" + std::to_string(kMaxKeyBytes) + " bytes");
  }
  std::string k;
  const auto& ps = impl_->options.policies;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    BuildStoreKey(k, impl_->options.key_prefix, key, ps[i].name);
    if (Status s = impl_->options.store->Reset(ps[i], k); !s.ok()) return s;
    (void)impl_->fallback_store.Reset(impl_->fallback_policies[i], k);
    impl_->deny_cache.Erase(k);
  }
  return Status::Ok();
}

LimiterStats Limiter::Stats() const {
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
  }
  return s;
}

void Store::EvaluateAsync(std::span<const StoreCheck> checks, Micros now, EvaluateCallback done) {
  Decision out[kMaxChecks];
  if (checks.size() > kMaxChecks) {
    done(Status::InvalidArgument("at most 16 checks per call"), {});
    return;
  }
  Status s = Evaluate(checks, now, std::span<Decision>(out, checks.size()));
  done(s, std::span<const Decision>(out, s.ok() ? checks.size() : 0));
}

}  // namespace sluice
