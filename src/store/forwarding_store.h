// A Store that passes every call (Run, RunOne, RunAsync, Reset, IsRemote, InProcess) through
// to another, for wrappers that watch a store's calls: a subclass overrides Done()
// only, so a call added to Store cannot be silently left to the base class's default
// (a wrapper that did not forward refunds once answered "not supported" for a store
// that supports them; one that did not forward InProcess would hide an in-process store
// from the decision layer's fast path).
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include "sluice/store.h"

namespace sluice {

class ForwardingStore : public Store {
 public:
  enum class Call { kRun, kReset };
  using TimePoint = std::chrono::steady_clock::time_point;

  // `inner` is required.
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}

  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->Run(batch, out);
    Done(Call::kRun, s, t0);
    return s;
  }
  Status RunOne(const StoreCheck& check, const Clock& clock, Decision* out) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->RunOne(check, clock, out);
    Done(Call::kRun, s, t0);
    return s;
  }
  // The wrapper must outlive the call (Done runs on completion).
  void RunAsync(const StoreBatch& batch, RunCallback done) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    inner_->RunAsync(
        batch, [this, t0, done = std::move(done)](const Status& s, std::span<const Decision> d) {
          Done(Call::kRun, s, t0);
          done(s, d);
        });
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    const TimePoint t0 = std::chrono::steady_clock::now();
    Status s = inner_->Reset(policy, key);
    Done(Call::kReset, s, t0);
    return s;
  }
  bool IsRemote() const override { return inner_->IsRemote(); }
  Store* InProcess() override { return inner_->InProcess(); }

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
