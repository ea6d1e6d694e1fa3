// Carry-over (Policy::on_change) in the in-process store: the parameters a slot's
// state was written under.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/algorithms.h"
#include "memory/slot.h"

namespace sluice::memory_internal {

// The parameters id a carry slot's state holds (bytes 16-19 of the state for fixed
// window, token bucket and GCRA, the top 24 bits of `prev` for a sliding counter).
inline std::uint32_t CarryId(Algorithm a, const State& st) {
  if (a == Algorithm::kSlidingWindowCounter) {
    return static_cast<std::uint32_t>(st.word.counter.prev >> kCounterIdShift);
  }
  std::uint32_t id;
  std::memcpy(&id, reinterpret_cast<const char*>(&st) + 16, sizeof(id));
  return id;
}
inline void SetCarryId(Algorithm a, State& st, std::uint32_t id) {
  if (a == Algorithm::kSlidingWindowCounter) {
    st.word.counter.prev =
        (st.word.counter.prev & kCounterMask) | (std::uint64_t{id} << kCounterIdShift);
    return;
  }
  std::memcpy(reinterpret_cast<char*>(&st) + 16, &id, sizeof(id));
}
// The state without its id, as the algorithms read it.
inline State CleanState(Algorithm a, const State& st) {
  State out = st;
  if (a == Algorithm::kSlidingWindowCounter) out.word.counter.prev &= kCounterMask;
  return out;
}

// Marks a word slot just written for a check whose parameters have id `id` (0: the
// policy records none, kAsIs): a carry slot holding the id, or a plain one.
inline void MarkCarry(Slot* s, Algorithm a, std::uint32_t id) {
  if (id == 0) {
    s->tag = TagOf(a);
    return;
  }
  s->tag = static_cast<std::uint8_t>(TagOf(a) | kCarryTag);
  SetCarryId(a, s->state, id);
}

// Carry-over: the registry of parameters that carry slots record, by id (1-based;
// 0 means none). It only grows (one entry per distinct limit, window and capacity a
// policy with a carry-over mode has used in this store); past kMaxCarryId entries,
// new parameters get 0 and their states are written without a record (as kAsIs).
class ParamsRegistry {
 public:
  std::uint32_t Id(const Policy& p) {
    const core::WrittenUnder w = core::ParamsOf(p);
    std::lock_guard<std::mutex> lock(mu_);
    const auto k = std::make_tuple(w.limit, w.window, w.cap);
    auto it = ids_.find(k);
    if (it != ids_.end()) return it->second;
    if (list_.size() >= kMaxCarryId) return 0;
    list_.push_back(w);
    const auto id = static_cast<std::uint32_t>(list_.size());
    ids_.emplace(k, id);
    return id;
  }
  core::WrittenUnder Get(std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return list_[id - 1];
  }

 private:
  std::mutex mu_;
  std::vector<core::WrittenUnder> list_;
  std::map<std::tuple<double, double, double>, std::uint32_t> ids_;
};

// Applies p.on_change to the state of a carry slot written under parameters `id`
// (!= p's `own` id): false when the state is to be taken as fresh; else `in` holds the
// state to decide on (converted for kProportional, as it is for kAsIs).
bool CarryOver(const Policy& p, ParamsRegistry& registry, std::uint32_t id, Micros now, State* in);

}  // namespace sluice::memory_internal
