// Concurrency limit: at most `limit` permits held at once per key, each until it is
// released or its lease (`window`) passes. The state is the set of held permits
// (id, expiry); lua/concurrency.lua mirrors this file with a sorted set scored by
// expiry, on Redis's clock.
//
//   drop permits with expires <= now
//   acquire: allowed <=> held + 1 <= limit   (a permit is one slot, whatever the cost)
//   release / extend: allowed <=> the permit is held
#include <algorithm>
#include <iterator>
#include <random>
#include <string>

#include "core/algorithms.h"
#include "sluice/permit.h"

namespace sluice::core {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// reset_after and the state's expiry: when the last held permit expires.
void Describe(const PermitSet& set, Micros now, Decision* d, Micros* expires) {
  const Micros last = set.empty() ? now : set.LatestExpiry();
  d->reset_after = last - now;
  *expires = last;
}

}  // namespace

bool ParsePermitId(std::string_view text, PermitId* out) {
  if (text.size() != kPermitIdLength) return false;
  PermitId id;
  for (std::size_t i = 0; i < kPermitIdLength; ++i) {
    const int v = HexValue(text[i]);
    if (v < 0) return false;
    std::uint64_t& w = i < 16 ? id.hi : id.lo;
    w = (w << 4) | static_cast<std::uint64_t>(v);
  }
  *out = id;
  return true;
}

namespace {

// Release and extend: whether `id` was held; it is removed, or (extend) set anew.
Decision ConcurrencyHeld(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                         bool extend, Micros* expires) {
  set.Trim(now);
  Decision d;
  d.limit = p.limit;
  if (extend) {
    d.allowed = set.Find(id) != nullptr;
    if (d.allowed) set.Set(id, now + p.window);
  } else {
    d.allowed = set.Erase(id);
  }
  d.remaining = p.limit > set.size() ? p.limit - set.size() : 0;
  Describe(set, now, &d, expires);
  return d;
}

}  // namespace

Decision ConcurrencyRelease(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                            Micros* expires) {
  return ConcurrencyHeld(p, set, now, id, /*extend=*/false, expires);
}

Decision ConcurrencyExtend(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                           Micros* expires) {
  return ConcurrencyHeld(p, set, now, id, /*extend=*/true, expires);
}

Decision Concurrency(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                     std::uint64_t cost, bool commit, Micros* expires) {
  set.Trim(now);
  Decision d;
  d.limit = p.limit;
  const std::uint64_t held = set.size();
  d.allowed = held + 1 <= p.limit;
  if (!d.allowed) {
    // The (held + 1 - limit)-th earliest expiry frees the first slot (more than one
    // permit too many only after the limit was lowered).
    d.retry_after = set.KthExpiry(held - p.limit) - now;
    d.remaining = p.limit > held ? p.limit - held : 0;
    Describe(set, now, &d, expires);
    return d;
  }
  if (cost == 0) {
    d.remaining = p.limit - held;
    Describe(set, now, &d, expires);
    return d;
  }
  // The decision describes the state after this acquire, committed now or later: the
  // last permit to expire is this one, or one held under a longer lease.
  d.remaining = p.limit - held - 1;
  *expires = set.empty() ? now + p.window : std::max(now + p.window, set.LatestExpiry());
  d.reset_after = *expires - now;
  if (commit) ConcurrencyCommit(p, set, now, id, expires);
  return d;
}

void ConcurrencyCommit(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                       Micros* expires) {
  set.Trim(now);
  set.Set(id, now + p.window);
  *expires = set.LatestExpiry();
}

// --- PermitSet ---

void PermitSet::Trim(Micros now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    by_id_.erase(by_expiry_.begin()->second);
    by_expiry_.erase(by_expiry_.begin());
  }
}

const Micros* PermitSet::Find(const PermitId& id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void PermitSet::Set(const PermitId& id, Micros expires) {
  const auto [it, inserted] = by_id_.try_emplace(id, expires);
  if (!inserted) {
    by_expiry_.erase({it->second, id});
    it->second = expires;
  }
  by_expiry_.emplace(expires, id);
}

bool PermitSet::Erase(const PermitId& id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  by_expiry_.erase({it->second, id});
  by_id_.erase(it);
  return true;
}

Micros PermitSet::KthExpiry(std::size_t k) const {
  return std::next(by_expiry_.begin(), static_cast<std::ptrdiff_t>(k))->first;
}

// Ids are chosen by clients: the hash is keyed by a per-process secret, so that ids
// that collide cannot be made in advance.
std::size_t PermitSet::IdHash::operator()(const PermitId& id) const {
  static const std::uint64_t key = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32 | rd()) | 1;
  }();
  const unsigned __int128 m =
      static_cast<unsigned __int128>(id.hi ^ key) * (id.lo ^ (key << 1 | 1));
  return static_cast<std::size_t>(static_cast<std::uint64_t>(m) ^
                                  static_cast<std::uint64_t>(m >> 64));
}

}  // namespace sluice::core
