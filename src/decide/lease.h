// Hot-key leases (Policy::lease, docs/algorithms.md "Leases"): the per-process table
// of leases the Decider grants from. A lease is a slice of a key's budget taken from
// the store in one call (a decision of cost N); requests of this process are then
// allowed locally from it until its units are used or it expires, and what is left
// when it ends is given back with a StoreOp::kRefund batch.
//
// Invariants the bounds in docs/algorithms.md rest on:
//  - at most one lease per key per table (one refill in flight per key; other threads
//    decide through the store meanwhile), of at most Policy::lease units;
//  - a lease is never used at or after its expiry, which is at most
//    LeaseValidity(policy) after the local time read before the grant was sent, and
//    for fixed window / sliding window counter at most the time to the end of the
//    store's window the store reported (Decision::reset_after), measured from the same
//    local instant (so never past the window's end while the clocks run at one rate).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/policy.h"

namespace sluice::decide {

// How long a lease of `p` may be used: p.lease_validity, or window / 10 when 0.
Micros LeaseValidity(const Policy& p);

// Units of a lease to give back to the store.
struct LeaseReturn {
  std::string key;
  Policy policy;  // a copy: the caller's policy may be gone by the time it is returned
  std::uint64_t units = 0;
};

// Thread-safe.
class LeaseTable {
 public:
  // At most `max_keys` keys hold lease state; beyond that, decisions go to the store.
  explicit LeaseTable(std::size_t max_keys);

  enum class Outcome {
    kLocal,   // decided from the lease: `*local` holds the decision
    kRefill,  // take a new lease of `grant` units, then call Granted/Denied/Failed
    kPlain,   // decide through the store as usual (another thread is refilling, or
              // the table is full, or the cost is as large as a lease)
  };
  struct Take {
    Outcome outcome = Outcome::kPlain;
    std::uint64_t grant = 0;
  };

  // Takes `cost` units for `key` (a store key of policy `p`, p.lease > 0) at local
  // time `now`. An expired or too small lease ends here: its unused units are
  // appended to `returns` (except fixed window / sliding counter units whose window
  // has ended: a refund would change nothing).
  Take Acquire(std::string_view key, const Policy& p, std::uint64_t cost, Micros now,
               Decision* local, std::vector<LeaseReturn>* returns);

  // The refill of `key` (Acquire said kRefill, with `grant` units, at `now`) was
  // allowed by the store with decision `d`; the caller's `cost` is taken from it.
  void Granted(std::string_view key, const Policy& p, std::uint64_t grant, std::uint64_t cost,
               Micros now, const Decision& d);
  // The refill was denied (`remaining` as the store reported) or failed: no lease.
  void Denied(std::string_view key, std::uint64_t remaining);
  void Failed(std::string_view key);

  // Forgets `key`'s lease without giving it back (after a Reset).
  void Drop(std::string_view key);
  // Ends every lease: their unused units are appended to `returns`.
  void EndAll(Micros now, std::vector<LeaseReturn>* returns);

  // Keys holding lease state (for tests).
  std::size_t Size() const;

 private:
  struct Entry {
    std::uint64_t units = 0;            // unused units of the current lease
    std::uint64_t granted = 0;          // size of the current (or last) lease; 0: none yet
    std::uint64_t used = 0;             // units of it used so far
    Micros granted_at = 0;              // local time read before the grant was sent
    Micros expires = 0;                 // the lease is not used at or after this local time
    Micros window_end = 0;              // fixed window / counter: end of the lease's window
    Micros reset_at = 0;                // local time the store said the key is full again
    std::uint64_t store_remaining = 0;  // the store's remaining after the grant
    std::uint64_t limit = 0;
    std::uint64_t remaining_hint = UINT64_MAX;  // the store's last reported remaining
    bool refilling = false;
    Policy policy;  // the policy of the current lease (for its return)
  };
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Entry, Hash, std::equal_to<>> map;
  };
  static constexpr std::size_t kShards = 16;
  Shard& ShardOf(std::string_view key);
  // Ends e's lease at `now`: appends its return, if any, and clears it.
  static void End(std::string_view key, Entry& e, Micros now, std::vector<LeaseReturn>* returns);
  // Size of the next lease of `e` for `cost`.
  static std::uint64_t NextSize(const Entry& e, const Policy& p, std::uint64_t cost, Micros now);

  std::size_t max_per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace sluice::decide
