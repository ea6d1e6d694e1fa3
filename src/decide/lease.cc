// The lease table: one lease per hot key, sized from the key's observed rate.
#include "decide/lease.h"

#include <algorithm>
#include <cmath>

namespace sluice::decide {
namespace {

bool WindowBound(const Policy& p) {
  return p.algorithm == Algorithm::kFixedWindow || p.algorithm == Algorithm::kSlidingWindowCounter;
}

}  // namespace

Micros LeaseValidity(const Policy& p) {
  const Micros v = p.lease_validity > 0 ? p.lease_validity : p.window / 10;
  return std::max<Micros>(v, 1);
}

LeaseTable::LeaseTable(std::size_t max_keys)
    : max_per_shard_(std::max<std::size_t>(1, max_keys / kShards)) {}

LeaseTable::Shard& LeaseTable::ShardOf(std::string_view key) {
  return shards_[std::hash<std::string_view>()(key) % kShards];
}

void LeaseTable::End(std::string_view key, Entry& e, Micros now,
                     std::vector<LeaseReturn>* returns) {
  if (e.units > 0 && returns != nullptr) {
    // A fixed window or sliding counter whose window has ended has nothing to give
    // back to (its refund changes nothing): skip the call.
    if (!(WindowBound(e.policy) && now >= e.window_end)) {
      returns->push_back(LeaseReturn{std::string(key), e.policy, e.units});
    }
  }
  e.units = 0;
  e.expires = 0;
}

std::uint64_t LeaseTable::NextSize(const Entry& e, const Policy& p, std::uint64_t cost,
                                   Micros now) {
  std::uint64_t target = cost;
  if (e.granted > 0) {
    // The rate this process used the last lease at, over the time it was usable:
    // until it ran out (seen now) or expired.
    const Micros held = std::min(now, e.expires > 0 ? e.expires : now) - e.granted_at;
    const double validity = static_cast<double>(LeaseValidity(p));
    double want =
        held <= 0 ? static_cast<double>(p.lease)
                  : std::ceil(static_cast<double>(e.used) * validity / static_cast<double>(held));
    // Grow at most 4x per lease: a short burst on a cold key does not take the
    // whole bound at once.
    want = std::min(want, 4.0 * static_cast<double>(e.granted));
    target = want >= static_cast<double>(p.lease)
                 ? p.lease
                 : std::max<std::uint64_t>(1, static_cast<std::uint64_t>(want));
  }
  // Leave the other processes half of what the store last said remains.
  if (e.remaining_hint != UINT64_MAX) target = std::min(target, e.remaining_hint / 2);
  target = std::min(target, p.lease);
  return std::max(target, cost);
}

LeaseTable::Take LeaseTable::Acquire(std::string_view key, const Policy& p, std::uint64_t cost,
                                     Micros now, Decision* local,
                                     std::vector<LeaseReturn>* returns) {
  if (cost == 0 || cost >= p.lease) return {};
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) {
    if (s.map.size() >= max_per_shard_) {
      // Full: forget keys with no lease and none being taken, ending expired ones.
      for (auto i = s.map.begin(); i != s.map.end();) {
        Entry& e = i->second;
        if (!e.refilling && (e.units == 0 || now >= e.expires)) {
          End(i->first, e, now, returns);
          i = s.map.erase(i);
        } else {
          ++i;
        }
      }
      if (s.map.size() >= max_per_shard_) return {};
    }
    it = s.map.emplace(std::string(key), Entry{}).first;
  }
  Entry& e = it->second;
  if (e.units >= cost && now < e.expires && now >= e.granted_at) {
    e.units -= cost;
    e.used += cost;
    *local = Decision{};
    local->allowed = true;
    local->limit = e.limit;
    local->remaining = e.store_remaining + e.units;
    local->reset_after = std::max<Micros>(0, e.reset_at - now);
    local->source = DecisionSource::kLease;
    return {Outcome::kLocal, 0};
  }
  if (e.refilling) return {};
  const std::uint64_t grant = NextSize(e, p, cost, now);
  End(key, e, now, returns);
  e.refilling = true;
  return {Outcome::kRefill, grant};
}

void LeaseTable::Granted(std::string_view key, const Policy& p, std::uint64_t grant,
                         std::uint64_t cost, Micros now, const Decision& d) {
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return;  // dropped (Reset) while the grant was in flight
  Entry& e = it->second;
  e.refilling = false;
  e.granted = grant;
  e.used = cost;
  e.units = grant - cost;
  e.granted_at = now;
  Micros valid = LeaseValidity(p);
  e.window_end = INT64_MAX;
  if (p.algorithm == Algorithm::kFixedWindow) {
    // reset_after of an allowed fixed-window decision: the time to the window's end.
    e.window_end = now + d.reset_after;
  } else if (p.algorithm == Algorithm::kSlidingWindowCounter) {
    // Allowed, so the current window's count is > 0: reset_after reaches one window
    // past the current window's end.
    e.window_end = now + (d.reset_after - p.window);
  }
  valid = std::min(valid, e.window_end - now);
  e.expires = now + std::max<Micros>(0, valid);
  e.reset_at = now + d.reset_after;
  e.store_remaining = d.remaining;
  e.remaining_hint = d.remaining;
  e.limit = d.limit;
  e.policy = p;
}

void LeaseTable::Denied(std::string_view key, std::uint64_t remaining) {
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return;
  it->second.refilling = false;
  it->second.granted = 0;
  it->second.remaining_hint = remaining;
}

void LeaseTable::Failed(std::string_view key) {
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return;
  it->second.refilling = false;
  it->second.granted = 0;
}

void LeaseTable::Drop(std::string_view key) {
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> lock(s.mu);
  s.map.erase(std::string(key));
}

void LeaseTable::EndAll(Micros now, std::vector<LeaseReturn>* returns) {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& [key, e] : s.map) End(key, e, now, returns);
  }
}

std::size_t LeaseTable::Size() const {
  std::size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace sluice::decide
