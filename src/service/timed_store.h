// The store wrapper sluiced's engine decides through: it times every store call into
// the latency histogram of /metrics and passes everything else through unchanged.
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include "core/forwarding_store.h"
#include "service/metrics.h"
#include "sluice/store.h"

namespace sluice::service {

// Times a store's evaluations and refunds into the latency histogram; passes every
// call through.
class TimedStore final : public ForwardingStore {
 public:
  TimedStore(std::shared_ptr<Store> inner, std::shared_ptr<Metrics> metrics)
      : ForwardingStore(std::move(inner)), metrics_(std::move(metrics)) {}

 private:
  void Done(Call call, const Status&, TimePoint start) override {
    if (call == Call::kReset) return;
    metrics_->ObserveStoreLatency(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
  }
  std::shared_ptr<Metrics> metrics_;
};

}  // namespace sluice::service
