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
#include "store_backends.h"

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

// A store on the shared test server (flushed) that coalesces up to `coalesce` calls, on
// one connection (Burst), caller time or Redis's clock.
inline std::shared_ptr<RedisStore> CoalescingStore(bool caller_time, int coalesce = 16) {
  auto url = FlushedRedisUrl();
  EXPECT_TRUE(url.ok()) << url.status().ToString();
  if (!url.ok()) return nullptr;
  RedisStoreOptions o;
  o.url = *url;
  o.use_caller_time = caller_time;
  o.connections = 1;
  o.coalesce = coalesce;
  o.call_timeout = 30'000'000;     // behaviour, not speed
  o.connect_timeout = 30'000'000;  // (a loaded CI machine: SCRIPT LOAD of every script)
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? *store : nullptr;
}

inline bool SameDecision(const Decision& a, const Decision& b) {
  return a.allowed == b.allowed && a.remaining == b.remaining && a.reset_after == b.reset_after &&
         a.retry_after == b.retry_after && a.limit == b.limit;
}

// Every key on `server` (at least one) has a TTL.
inline void ExpectEveryKeyHasATtl(RedisServer& server) {
  auto all = server.Command({"KEYS", "*"});
  ASSERT_TRUE(all.ok());
  ASSERT_FALSE(all->elements.empty());
  for (const auto& k : all->elements) {
    auto ttl = server.Command({"PTTL", k.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k.str;
  }
}

// Decides `g` on `model` and expects `got` to be the same decisions, field by field;
// counts the model's denials in `denied`. `where` names the group in a failure.
template <class Model>
void ExpectAsModel(Model& model, const Group& g, const Outcome& got, const std::string& where,
                   int& denied) {
  Decision want[kMaxBatchChecks];
  ASSERT_TRUE(model.Run({.checks = g.checks, .now = g.now}, want).ok());
  ASSERT_TRUE(got.status.ok()) << where << ": " << got.status.ToString();
  ASSERT_EQ(got.decisions.size(), g.checks.size());
  for (std::size_t i = 0; i < g.checks.size(); ++i) {
    const Decision& a = want[i];
    const Decision& b = got.decisions[i];
    ASSERT_TRUE(SameDecision(a, b))
        << where << " check " << i << " key " << g.checks[i].key << " cost " << g.checks[i].cost
        << " now " << g.now << "\n  model: allowed=" << a.allowed << " remaining=" << a.remaining
        << " reset_after=" << a.reset_after << " retry_after=" << a.retry_after
        << "\n  redis: allowed=" << b.allowed << " remaining=" << b.remaining
        << " reset_after=" << b.reset_after << " retry_after=" << b.retry_after;
    if (!a.allowed) ++denied;
  }
}

}  // namespace sluice::testing
