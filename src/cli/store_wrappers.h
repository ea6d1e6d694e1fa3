// Store wrappers of the `sluice` tool: they watch a store's calls (errors) for a command
// and pass every call through to the store they wrap.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "sluice/store.h"
#include "store/forwarding_store.h"

namespace sluice::cli {

// Forwards to the real store and remembers its last error, so that a store failure
// (which the Limiter turns into a fail-open decision) is reported as an error.
class RecordingStore final : public ForwardingStore {
 public:
  explicit RecordingStore(std::shared_ptr<Store> inner) : ForwardingStore(std::move(inner)) {}
  const Status& error() const { return error_; }

 private:
  void Done(Call, const Status& s, TimePoint) override {
    if (!s.ok()) error_ = s;
  }
  Status error_;
};

// Counts store errors by kind for the Limiter engine, where the Limiter turns them
// into failure-mode decisions.
class CountingStore final : public ForwardingStore {
 public:
  explicit CountingStore(std::shared_ptr<Store> inner) : ForwardingStore(std::move(inner)) {}
  std::array<std::atomic<std::uint64_t>, 8> errors{};

 private:
  void Done(Call, const Status& s, TimePoint) override {
    if (!s.ok()) errors[static_cast<int>(s.code()) & 7].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace sluice::cli
