// Space-saving top keys per rule (service/admin_top_keys.h).
#include "service/admin_top_keys.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/hash.h"
#include "service/metrics.h"

namespace sluice::service {
namespace {

std::atomic<std::size_t> g_summaries{0};

}  // namespace

std::string_view DescriptorPartOf(std::string_view store_key) {
  const std::size_t open = store_key.find('{');
  const std::size_t close = store_key.rfind('}');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return store_key;
  }
  return store_key.substr(open + 1, close - open - 1);
}

void TopKeys::Record(std::string_view key, Micros now) {
  // The hash covers the whole key (and whether it was cut), so two long keys with the
  // same first kKeyBytes count apart.
  const bool truncated = key.size() > kKeyBytes;
  const std::uint64_t h = Fnv1a64(key, kFnvOffset) ^ static_cast<std::uint64_t>(truncated);
  const std::string_view kept = key.substr(0, kKeyBytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++total_;
  std::size_t min = 0;
  for (std::size_t i = 0; i < used_; ++i) {
    if (hash_[i] == h && std::string_view(slots_[i].key, slots_[i].len) == kept &&
        slots_[i].truncated == truncated) {
      ++count_[i];
      slots_[i].last = now;
      return;
    }
    if (count_[i] < count_[min]) min = i;
  }
  // Not counted yet: a free counter, else the least counted one's (its count, plus this
  // denial, bounds how often the new key can have been denied).
  std::size_t i = min;
  if (used_ < kCounters) {
    i = used_++;
    count_[i] = 1;
    slots_[i].error = 0;
  } else {
    slots_[i].error = count_[i];
    count_[i] += 1;
  }
  Slot& s = slots_[i];
  hash_[i] = h;
  s.truncated = truncated;
  s.len = static_cast<std::uint8_t>(kept.size());
  std::memcpy(s.key, kept.data(), kept.size());
  s.last = now;
}

std::vector<TopKeys::Entry> TopKeys::Top(std::size_t n) const {
  std::vector<Entry> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(used_);
    for (std::size_t i = 0; i < used_; ++i) {
      const Slot& s = slots_[i];
      out.push_back(Entry{std::string(s.key, s.len), count_[i], s.error, s.last, s.truncated});
    }
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.count != b.count ? a.count > b.count : a.key < b.key;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

std::uint64_t TopKeys::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

TopKeys& TopKeysOf(DescriptorCounters& c) {
  TopKeys* t = c.top.load(std::memory_order_acquire);
  if (t != nullptr) return *t;
  auto* made = new TopKeys();
  if (c.top.compare_exchange_strong(t, made, std::memory_order_acq_rel)) {
    g_summaries.fetch_add(1, std::memory_order_relaxed);
    return *made;
  }
  delete made;  // another thread made it first
  return *t;
}

DescriptorCounters::~DescriptorCounters() {
  if (TopKeys* t = top.load()) {
    delete t;
    g_summaries.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::size_t TopKeysBytes() {
  return g_summaries.load(std::memory_order_relaxed) * sizeof(TopKeys);
}

void AppendTopKeySeries(std::string& out, std::string_view labels, const TopKeys& top,
                        std::size_t n) {
  const std::vector<TopKeys::Entry> entries = top.Top(n);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string l(labels);
    l += ",rank=\"" + std::to_string(i + 1) + "\",key=\"" + EscapeLabel(entries[i].key) + "\"";
    AppendMetricLine(out, "sluiced_top_limited_key_denials", l, entries[i].count);
  }
}

}  // namespace sluice::service
