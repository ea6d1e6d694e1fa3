// The store wrapper sluiced's engine decides through: it times every store call into
// the latency histogram of /metrics and passes everything else through unchanged.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include "service/metrics.h"
#include "sluice/store.h"
#include "store/forwarding_store.h"

namespace sluice::service {

// Times a store's evaluations and refunds into the latency histogram and calls
// `on_full` for each one refused with kResourceExhausted (an in-process store at its key
// cap); passes every call through.
class TimedStore final : public ForwardingStore {
 public:
  TimedStore(std::shared_ptr<Store> inner, std::shared_ptr<Metrics> metrics,
             std::function<void()> on_full = nullptr)
      : ForwardingStore(std::move(inner)),
        metrics_(std::move(metrics)),
        on_full_(std::move(on_full)) {}

 private:
  void Done(Call call, const Status& s, TimePoint start) override {
    if (call == Call::kReset) return;
    if (s.code() == ErrorCode::kResourceExhausted && on_full_) on_full_();
    metrics_->ObserveStoreLatency(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
  }
  std::shared_ptr<Metrics> metrics_;
  std::function<void()> on_full_;
};

}  // namespace sluice::service
