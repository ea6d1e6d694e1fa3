// Calls that reach a RedisStore connection's queue together, without timing: submitted
// back to back from the callback of another call, on the connection's I/O thread (a
// store with connections = 1), every one of them is queued before that thread takes its
// queue again, so the I/O thread may coalesce them (docs/redis.md, "Coalesced calls").
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/redis_store.h"

namespace sluice::testing {

struct Outcome {
  Status status = Status::Internal("not answered");
  std::vector<Decision> decisions;
};

// A batch of one caller: its checks and its now.
struct Group {
  std::vector<StoreCheck> checks;
  Micros now = 0;
};

// Evaluates every group, submitted back to back from the callback of a peek on
// `trigger_key` (on the I/O thread): they reach the connection's queue together.
// Waits (bounded) for every answer.
inline std::vector<Outcome> Burst(RedisStore& store, const Policy& trigger_policy,
                                  const std::vector<Group>& groups, Micros trigger_now) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Outcome> out;
    std::size_t answered = 0;
  };
  auto shared = std::make_shared<Shared>();
  shared->out.resize(groups.size());
  const std::string trigger_key = "sluice:{coalesce-trigger}:t";
  const StoreCheck trigger{.policy = &trigger_policy, .key = trigger_key, .cost = 0};
  store.RunAsync({.checks = std::span<const StoreCheck>(&trigger, 1), .now = trigger_now},
                 [&store, &groups, shared](const Status& s, std::span<const Decision>) {
                   EXPECT_TRUE(s.ok()) << s.ToString();
                   for (std::size_t i = 0; i < groups.size(); ++i) {
                     store.RunAsync({.checks = groups[i].checks, .now = groups[i].now},
                                    [shared, i](const Status& st, std::span<const Decision> d) {
                                      std::lock_guard<std::mutex> lock(shared->mu);
                                      shared->out[i].status = st;
                                      shared->out[i].decisions.assign(d.begin(), d.end());
                                      ++shared->answered;
                                      shared->cv.notify_all();
                                    });
                   }
                 });
  std::unique_lock<std::mutex> lock(shared->mu);
  EXPECT_TRUE(shared->cv.wait_for(lock, std::chrono::seconds(60), [&] {
    return shared->answered == groups.size();
  })) << "not every caller was answered";
  return shared->out;
}

}  // namespace sluice::testing
