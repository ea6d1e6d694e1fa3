// A Store that passes every call (Evaluate, Refund, Reset, their asynchronous forms and
// IsRemote) through to another, for wrappers that watch a store's calls: a subclass
// overrides Done() only, so a call added to Store cannot be silently left to the base
// class's default again (a wrapper that did not forward Refund answered "not
// supported" for a store that supports it).
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include "sluice/store.h"

namespace sluice {

class ForwardingStore : public Store {
 public:
  enum class Call { kEvaluate, kRefund, kReset };
  using TimePoint = std::chrono::steady_clock::time_point;

  // `inner` is required.
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  Status Evaluate(std::span<const StoreCheck> checks, Micros now,
                  std::span<Decision> out) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->Evaluate(checks, now, out);
    Done(Call::kEvaluate, s, t0);
    return s;
  }
  // The wrapper must outlive the call (Done runs on completion).
  void EvaluateAsync(std::span<const StoreCheck> checks, Micros now,
                     EvaluateCallback done) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    inner_->EvaluateAsync(
        checks, now,
        [this, t0, done = std::move(done)](const Status& s, std::span<const Decision> d) {
          Done(Call::kEvaluate, s, t0);
          done(s, d);
        });
  }
  Status Refund(std::span<const StoreCheck> checks, Micros now) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->Refund(checks, now);
    Done(Call::kRefund, s, t0);
    return s;
  }
  void RefundAsync(std::span<const StoreCheck> checks, Micros now, RefundCallback done) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    inner_->RefundAsync(checks, now, [this, t0, done = std::move(done)](const Status& s) {
      Done(Call::kRefund, s, t0);
      done(s);
    });
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->Reset(policy, key);
    Done(Call::kReset, s, t0);
    return s;
  }
  bool IsRemote() const override { return inner_->IsRemote(); }

  Store& inner() const { return *inner_; }

 protected:
  // Called once per completed call with its outcome and its start time (on the store's
  // I/O thread for the asynchronous forms).
  virtual void Done(Call call, const Status& status, TimePoint start) {
    (void)call;
    (void)status;
    (void)start;
  }

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace sluice
