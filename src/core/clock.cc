#include "sluice/clock.h"

namespace sluice {

SteadyEpochClock::SteadyEpochClock()
    : epoch_at_start_(std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()),
      steady_at_start_(std::chrono::steady_clock::now()) {}

Micros SteadyEpochClock::Now() const {
  return epoch_at_start_ + std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now() - steady_at_start_)
                               .count();
}

}  // namespace sluice

// ---- Waiting (issue #12, reservations) ----

namespace sluice {

void CancellationToken::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  // Under the lock: Unsubscribe waits for a callback that is running.
  for (auto& [id, f] : callbacks_) f();
  callbacks_.clear();
}

std::uint64_t CancellationToken::OnCancel(std::function<void()> f) {
  std::unique_lock<std::mutex> lock(mu_);
  const std::uint64_t id = next_id_++;
  if (cancelled_.load(std::memory_order_acquire)) {
    lock.unlock();
    f();
    return id;
  }
  callbacks_.emplace_back(id, std::move(f));
  return id;
}

void CancellationToken::Unsubscribe(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it) {
    if (it->first == id) {
      callbacks_.erase(it);
      return;
    }
  }
}

namespace {

// Subscribes a wake-up of `cv` (guarded by `mu`) to `cancel` for the scope's life.
class CancelWake {
 public:
  CancelWake(CancellationToken* cancel, std::mutex& mu, std::condition_variable& cv)
      : cancel_(cancel) {
    if (cancel_ == nullptr) return;
    id_ = cancel_->OnCancel([&mu, &cv] {
      // Taking the lock orders the wake-up after the waiter's check of the flag.
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    });
  }
  ~CancelWake() {
    if (cancel_ != nullptr) cancel_->Unsubscribe(id_);
  }
  CancelWake(const CancelWake&) = delete;
  CancelWake& operator=(const CancelWake&) = delete;

 private:
  CancellationToken* cancel_;
  std::uint64_t id_ = 0;
};

bool Cancelled(const CancellationToken* cancel) {
  return cancel != nullptr && cancel->IsCancelled();
}

}  // namespace

bool SystemSleeper::SleepFor(Micros d, CancellationToken* cancel) {
  if (Cancelled(cancel)) return false;
  if (d <= 0) return true;
  std::mutex mu;
  std::condition_variable cv;
  CancelWake wake(cancel, mu, cv);
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(d);
  std::unique_lock<std::mutex> lock(mu);
  return !cv.wait_until(lock, until, [cancel] { return Cancelled(cancel); });
}

ManualSleeper::ManualSleeper(std::shared_ptr<ManualClock> clock, bool auto_advance)
    : clock_(std::move(clock)), auto_advance_(auto_advance) {}

bool ManualSleeper::SleepFor(Micros d, CancellationToken* cancel) {
  if (Cancelled(cancel)) return false;
  if (d <= 0) return true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slept_.push_back(d);
  }
  if (auto_advance_) {
    clock_->Advance(d);
    return true;
  }
  const Micros until = clock_->Now() + d;
  CancelWake wake(cancel, mu_, cv_);
  std::unique_lock<std::mutex> lock(mu_);
  ++sleeping_;
  cv_.notify_all();  // AwaitSleepers
  cv_.wait(lock, [&] { return Cancelled(cancel) || clock_->Now() >= until; });
  --sleeping_;
  return !(clock_->Now() < until);
}

void ManualSleeper::Advance(Micros d) {
  std::lock_guard<std::mutex> lock(mu_);
  clock_->Advance(d);
  cv_.notify_all();
}

void ManualSleeper::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::size_t ManualSleeper::sleepers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sleeping_;
}

bool ManualSleeper::AwaitSleepers(std::size_t n, std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, bound, [&] { return sleeping_ >= n; });
}

std::vector<Micros> ManualSleeper::slept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slept_;
}

}  // namespace sluice
