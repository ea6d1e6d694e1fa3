// Internal: delivers immediate failures (not connected, shutting down) on a thread of
// its own, never on the thread that submitted the command.
//
// Why: an asynchronous caller that submits again from its completion callback (a
// load generator does) would otherwise loop submit -> fail -> submit on whichever
// thread completed it — often a connection's I/O thread, which then never gets back
// to reconnecting (issue #11 item 2). With this queue, a failure costs the submitter
// nothing and the I/O thread's reconnect loop is independent of what callbacks do.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "redis/reply.h"
#include "sluice/status.h"

namespace sluice::redis {

using ReplyCallback = std::function<void(const Status& status, const redisReply* reply)>;

class CompletionQueue {
 public:
  CompletionQueue();
  // Delivers what is still queued, then joins the thread.
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Calls every callback with `status` (and no reply) on the queue's thread, in order.
  // After shutdown began, calls them inline.
  void Fail(std::vector<ReplyCallback> callbacks, const Status& status);

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Status, ReplyCallback>> items_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice::redis
