// Concurrency limit: at most `limit` permits held at once per key, each until it is
// released or its lease (`window`) passes. The state is the set of held permits
// (id, expiry); lua/concurrency.lua mirrors this file with a sorted set scored by
// expiry, on Redis's clock.
//
//   drop permits with expires <= now
//   acquire: allowed <=> held + 1 <= limit   (a permit is one slot, whatever the cost)
//   release / extend: allowed <=> the permit is held
#include <algorithm>
#include <string>

#include "core/algorithms.h"
#include "sluice/permit_id.h"

namespace sluice::core {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void Trim(PermitSet& set, Micros now) {
  while (set.size() > 0 && set.at(0).expires <= now) set.pop_front();
}

// Index of `id` in `set`, or set.size().
std::size_t Find(const PermitSet& set, const PermitId& id) {
  std::size_t i = 0;
  while (i < set.size() && !(set.at(i).id == id)) ++i;
  return i;
}

// reset_after and the state's expiry: when the last held permit expires.
void Describe(const PermitSet& set, Micros now, Decision* d, Micros* expires) {
  const Micros last = set.size() > 0 ? set.at(set.size() - 1).expires : now;
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
  Trim(set, now);
  Decision d;
  d.limit = p.limit;
  const std::size_t i = Find(set, id);
  d.allowed = i < set.size();
  if (d.allowed) {
    set.erase(i);
    if (extend) set.push_back({id, now + p.window});
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
  Trim(set, now);
  Decision d;
  d.limit = p.limit;
  const std::uint64_t held = set.size();
  d.allowed = held + 1 <= p.limit;
  if (!d.allowed) {
    // The (held + 1 - limit)-th earliest expiry frees the first slot (more than one
    // permit too many only after the limit was lowered).
    d.retry_after = set.at(held - p.limit).expires - now;
    d.remaining = p.limit > held ? p.limit - held : 0;
    Describe(set, now, &d, expires);
    return d;
  }
  if (cost == 0) {
    d.remaining = p.limit - held;
    Describe(set, now, &d, expires);
    return d;
  }
  // The decision describes the state after this acquire, committed now or later.
  d.remaining = p.limit - held - 1;
  d.reset_after = p.window;
  *expires = now + p.window;
  if (commit) ConcurrencyCommit(p, set, now, id, expires);
  return d;
}

void ConcurrencyCommit(const Policy& p, PermitSet& set, Micros now, const PermitId& id,
                       Micros* expires) {
  Trim(set, now);
  const std::size_t i = Find(set, id);
  if (i < set.size()) set.erase(i);
  set.push_back({id, now + p.window});
  *expires = now + p.window;
}

}  // namespace sluice::core
