#include "redis/completion_queue.h"

#include "redis/client_thread.h"

namespace sluice::redis {

CompletionQueue::CompletionQueue() : thread_(StartClientThread([this] { Run(); })) {}

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionQueue::Fail(std::vector<ReplyCallback> callbacks, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      for (ReplyCallback& cb : callbacks) items_.emplace_back(status, std::move(cb));
      cv_.notify_one();
      return;
    }
  }
  for (ReplyCallback& cb : callbacks) cb(status, nullptr);
}

void CompletionQueue::Run() {
  std::deque<std::pair<Status, ReplyCallback>> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (items_.empty()) return;  // stopping and drained
    batch.swap(items_);
    lock.unlock();
    for (auto& [status, cb] : batch) cb(status, nullptr);
    batch.clear();
    lock.lock();
  }
}

}  // namespace sluice::redis
