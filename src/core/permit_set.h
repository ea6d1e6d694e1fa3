// Internal: the permits held for one key (concurrency limits), indexed both by id and
// by expiry, so that every operation of core/concurrency.cc costs O(log n) in the
// number held (issue #20 item 4). The Lua mirror is a sorted set of ids scored by
// expiry (lua/concurrency.lua); like it, entries may be set in any expiry order (a
// shorter lease under the same policy name), and every expired entry is trimmed,
// wherever it sits in that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "sluice/clock.h"

namespace sluice::core {

// A held permit's id: the 32 hex characters of sluice/permit.h as two words.
struct PermitId {
  std::uint64_t hi = 0, lo = 0;
  bool operator==(const PermitId&) const = default;
  auto operator<=>(const PermitId&) const = default;
};

// Parses a permit id (kPermitIdLength lower-case hex characters); false if it is not one.
bool ParsePermitId(std::string_view text, PermitId* out);

class PermitSet {
 public:
  // Permits held (expired ones not yet trimmed included).
  std::size_t size() const { return by_id_.size(); }
  bool empty() const { return by_id_.empty(); }
  // Drops every permit that expired by `now` (expires <= now); O(log n) each.
  void Trim(Micros now);
  // The expiry of `id` when held, else nullptr.
  const Micros* Find(const PermitId& id) const;
  // Holds `id` until `expires` (replacing its entry when it is held already).
  void Set(const PermitId& id, Micros expires);
  // Removes `id`; false when it was not held.
  bool Erase(const PermitId& id);
  // The k-th earliest expiry (0 = the earliest; k < size()). O(log n + k): k is above
  // 0 only when more permits are held than the limit (the limit was lowered).
  Micros KthExpiry(std::size_t k) const;
  // The latest expiry (not empty()).
  Micros LatestExpiry() const { return by_expiry_.rbegin()->first; }

 private:
  struct IdHash {
    std::size_t operator()(const PermitId& id) const;
  };
  std::set<std::pair<Micros, PermitId>> by_expiry_;
  std::unordered_map<PermitId, Micros, IdHash> by_id_;
};

}  // namespace sluice::core
