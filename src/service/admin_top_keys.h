// The top limited keys of one rule (issue #24): a space-saving heavy-hitters summary
// (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements
// in data streams", 2005) fed with every denial of the rule. k counters of fixed size:
// its memory never grows, whatever the number of distinct keys denied. A key that was
// denied more than (denials / k) times is always among the counters, and each count is
// an overestimate by at most its `error`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"

namespace sluice::service {

class TopKeys {
 public:
  // Counters per rule.
  static constexpr std::size_t kCounters = 16;
  // Bytes of a key kept; a longer key is kept as its first bytes and a hash of the
  // whole (TopKey::truncated), so two long keys still count apart.
  static constexpr std::size_t kKeyBytes = 112;

  // Counts one denial of `key` at `now`. Thread-safe; no allocation.
  void Record(std::string_view key, Micros now);

  struct Entry {
    std::string key;
    std::uint64_t count = 0;  // denials counted (an overestimate by at most `error`)
    std::uint64_t error = 0;
    Micros last = 0;  // the time of its last denial (the engine's clock)
    bool truncated = false;
  };
  // The counted keys, most denied first (at most `n`).
  std::vector<Entry> Top(std::size_t n = kCounters) const;
  // Denials recorded in all.
  std::uint64_t total() const;

 private:
  // What a denial reads, apart (4 cache lines: the scan for a key or for the least
  // counted one touches nothing else); each key's bytes and details beside.
  struct Slot {
    std::uint64_t error = 0;
    Micros last = 0;
    std::uint8_t len = 0;
    bool truncated = false;
    char key[kKeyBytes];
  };
  mutable std::mutex mu_;  // guards everything below
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
  std::array<std::uint64_t, kCounters> hash_{};
  std::array<std::uint64_t, kCounters> count_{};
  std::array<Slot, kCounters> slots_{};
};

// The rules' summaries: one TopKeys per rule series, made at its first denial. Memory:
// sizeof(TopKeys) per rule that has denied at least once.
TopKeys& TopKeysOf(struct DescriptorCounters& counters);

// How many TopKeys exist and their bytes (the benchmark and /admin/stats report it).
std::size_t TopKeysBytes();

// Appends the Prometheus series of `top` (its `n` most denied keys):
//   sluiced_top_limited_key_denials{LABELS,rank="1",key="..."} COUNT
// `labels` are the rule series' labels (domain="...",descriptor="...").
void AppendTopKeySeries(std::string& out, std::string_view labels, const TopKeys& top,
                        std::size_t n);

// The part of a store key ("sluiced:{DESCRIPTOR}:POLICY") that names the descriptor:
// the rule's keys differ only there. The whole key when it has no braces.
std::string_view DescriptorPartOf(std::string_view store_key);

// Per rule, the series the top keys are exposed as in /metrics.
inline constexpr std::size_t kTopKeysInMetrics = 5;

}  // namespace sluice::service
