// The in-process store's usage reservation records (memory/usage.h).
#include "memory/usage.h"

#include <algorithm>

#include "sluice/store.h"

namespace sluice::memory_internal {

std::string UsageTable::KeyOf(std::string_view key, std::string_view id) {
  std::string k;
  k.reserve(key.size() + 1 + id.size());
  k.append(key).push_back('\0');  // store keys hold no NUL byte (escaped)
  k.append(id);
  return k;
}

void UsageTable::SweepLocked(Micros now) {
  std::erase_if(records_, [now](const auto& kv) { return kv.second.expires <= now; });
  swept_at_ = records_.size();
}

bool UsageTable::Record(std::string_view key, std::string_view id, std::uint64_t taken,
                        Micros expires, Micros now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.size() >= max_ || records_.size() >= 2 * std::max<std::size_t>(swept_at_, 512)) {
    SweepLocked(now);
  }
  if (records_.size() >= max_) return false;
  records_[KeyOf(key, id)] = Entry{taken, expires, false};
  return true;
}

bool UsageTable::ClaimAll(const std::string_view* keys, const std::string_view* ids, std::size_t n,
                          Micros now, Claim* out, std::size_t* missing) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* found[kMaxBatchChecks];
  for (std::size_t i = 0; i < n; ++i) {
    auto it = records_.find(KeyOf(keys[i], ids[i]));
    if (it == records_.end() || it->second.expires <= now) {
      *missing = i;
      return false;
    }
    found[i] = &it->second;
  }
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = Claim{found[i]->settled ? Found::kSettled : Found::kOpen, found[i]->taken};
    found[i]->settled = true;
  }
  return true;
}

std::size_t UsageTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

}  // namespace sluice::memory_internal
