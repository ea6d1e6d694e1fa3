// Usage reservations in the in-process store (StoreCheck::usage_id, StoreOp::kSettle):
// what each reserved check took, by (store key, id), until the record expires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "sluice/clock.h"

namespace sluice::memory_internal {

// Thread-safe. Bounded: at most `max_records` live records (expired ones are swept
// when the table is full, and whenever it has doubled since the last sweep).
class UsageTable {
 public:
  explicit UsageTable(std::size_t max_records) : max_(max_records) {}

  // Records that the check of `key` took `taken` under reservation `id`, until
  // `expires`. False when the table is full of live records.
  bool Record(std::string_view key, std::string_view id, std::uint64_t taken, Micros expires,
              Micros now);

  // What a settle finds for (key, id): nothing (unknown or expired), a record settled
  // already, or a record to settle (its `taken`).
  enum class Found : std::uint8_t { kNone, kSettled, kOpen };
  struct Claim {
    Found found = Found::kNone;
    std::uint64_t taken = 0;
  };
  // Looks every (keys[i], ids[i]) up; when every one is found, marks the open ones settled
  // (kept until their expiry) and returns true; otherwise changes nothing and returns
  // false with *missing the index of the first one not found.
  bool ClaimAll(const std::string_view* keys, const std::string_view* ids, std::size_t n,
                Micros now, Claim* out, std::size_t* missing);

  std::size_t size() const;

 private:
  struct Entry {
    std::uint64_t taken;
    Micros expires;
    bool settled;
  };
  static std::string KeyOf(std::string_view key, std::string_view id);
  void SweepLocked(Micros now);

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> records_;
  std::size_t max_;
  std::size_t swept_at_ = 0;  // the size after the last sweep
};

}  // namespace sluice::memory_internal
