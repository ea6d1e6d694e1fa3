// Calls that reach a RedisStore connection's queue together, without timing: submitted
// back to back from the callback of another call, on the connection's I/O thread (a
// store with connections = 1), every one of them is queued before that thread takes its
// queue again, so the I/O thread may coalesce them (docs/redis.md, "Coalesced calls").
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {

struct Outcome {
  Status status = Status::Internal("not answered");
  std::vector<Decision> decisions;
};

// A batch of one caller: its checks, its now and what it does (a decision or a penalty).
struct Group {
  std::vector<StoreCheck> checks;
  Micros now = 0;
  StoreOp op = StoreOp::kDecide;
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
                     store.RunAsync(
                         {.op = groups[i].op, .checks = groups[i].checks, .now = groups[i].now},
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

// A store on `server_url` (empty: the shared test server, flushed) that coalesces up to
// `coalesce` calls, on one connection (Burst), caller time or Redis's clock.
inline std::shared_ptr<RedisStore> CoalescingStore(bool caller_time, int coalesce = 16,
                                                   const std::string& server_url = {}) {
  auto url = server_url.empty() ? FlushedRedisUrl() : Result<std::string>(server_url);
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
         a.retry_after == b.retry_after && a.limit == b.limit && a.wait == b.wait &&
         a.charged == b.charged;
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
  ASSERT_TRUE(model.Run({.op = g.op, .checks = g.checks, .now = g.now}, want).ok());
  ASSERT_TRUE(got.status.ok()) << where << ": " << got.status.ToString();
  ASSERT_EQ(got.decisions.size(), g.checks.size());
  for (std::size_t i = 0; i < g.checks.size(); ++i) {
    const Decision& a = want[i];
    const Decision& b = got.decisions[i];
    ASSERT_TRUE(SameDecision(a, b))
        << where << " check " << i << " key " << g.checks[i].key << " cost " << g.checks[i].cost
        << " now " << g.now << "\n  model: allowed=" << a.allowed << " remaining=" << a.remaining
        << " reset_after=" << a.reset_after << " retry_after=" << a.retry_after
        << " wait=" << a.wait << " charged=" << a.charged << "\n  redis: allowed=" << b.allowed
        << " remaining=" << b.remaining << " reset_after=" << b.reset_after
        << " retry_after=" << b.retry_after << " wait=" << b.wait << " charged=" << b.charged;
    if (!a.allowed) ++denied;
  }
}

// A random cost for a check of `p`: mostly 1, a peek (0) one time in eight, up to the
// capacity one time in eight.
inline std::uint64_t RandomCost(std::mt19937_64& rng, const Policy& p) {
  switch (rng() % 8) {
    case 0:
      return 0;  // peek
    case 1:
      return 1 + rng() % p.Capacity();
    default:
      return 1;
  }
}

// Adds up to `n` checks to `g`, each on a random one of `keys` (key i under policy
// i % policies.size()) at a RandomCost, no key twice (the Limiter never sends one key
// twice in a batch).
inline void AddRandomChecks(std::mt19937_64& rng, Group& g, std::size_t n,
                            const std::vector<std::string>& keys,
                            const std::vector<Policy>& policies) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t ki = rng() % keys.size();
    const Policy& p = policies[ki % policies.size()];
    bool dup = false;
    for (const StoreCheck& c : g.checks) dup = dup || c.key == keys[ki];
    if (dup) continue;
    g.checks.push_back(StoreCheck{.policy = &p, .key = keys[ki], .cost = RandomCost(rng, p)});
  }
}

// ExpectAsModel for every group of a burst, in `order` (their indices; empty: as
// queued), counting the groups compared in `compared`. `where` names the burst.
template <class Model>
void ExpectBurstAsModel(Model& model, const std::vector<Group>& groups,
                        const std::vector<Outcome>& got, std::span<const std::size_t> order,
                        const std::string& where, int& denied, int& compared) {
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::size_t gi = order.empty() ? i : order[i];
    ExpectAsModel(model, groups[gi], got[gi],
                  where + " group " + std::to_string(gi) + " of " + std::to_string(groups.size()),
                  denied);
    if (::testing::Test::HasFatalFailure()) return;
    ++compared;
  }
}

// From here on `server`'s SLOWLOG keeps every command with its arguments (ScriptCalls).
inline void RecordEveryCommand(RedisServer& server) {
  ASSERT_TRUE(server.Command({"CONFIG", "SET", "slowlog-log-slower-than", "0"}).ok());
  ASSERT_TRUE(server.Command({"CONFIG", "SET", "slowlog-max-len", "100000"}).ok());
  ASSERT_TRUE(server.Command({"SLOWLOG", "RESET"}).ok());
}

// The EVALSHAs of each script (by SHA1) since RecordEveryCommand, whose settings it
// undoes.
inline std::map<std::string, int> ScriptCalls(RedisServer& server) {
  std::map<std::string, int> calls;
  auto log = server.Command({"SLOWLOG", "GET", "-1"});
  EXPECT_TRUE(server.Command({"CONFIG", "SET", "slowlog-log-slower-than", "10000"}).ok());
  EXPECT_TRUE(server.Command({"CONFIG", "SET", "slowlog-max-len", "128"}).ok());
  EXPECT_TRUE(log.ok());
  if (!log.ok()) return calls;
  for (const auto& entry : log->elements) {
    if (entry.elements.size() < 4 || entry.elements[3].elements.size() < 2) continue;
    const auto& args = entry.elements[3].elements;
    if (args[0].str == "EVALSHA" || args[0].str == "evalsha") ++calls[args[1].str];
  }
  return calls;
}

}  // namespace sluice::testing
