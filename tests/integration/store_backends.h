// Store backends for typed tests: the same test body runs against MemoryStore and
// against RedisStore on a real redis-server (started once per test binary, emptied
// before each test). Redis runs in caller-time mode so a ManualClock drives both.
// A test binary can run the shared suites on another topology by defining
// SLUICE_SUITE_BACKENDS / SLUICE_DIFFERENTIAL_BACKEND (the sentinel suites do).
//
// Compiled with SLUICE_TESTS_ON_CLUSTER (tests/cluster), "Redis" is a local 6-node
// Redis Cluster instead (redis_cluster.h), started once per binary: the same suites
// then hold the cluster router to the same behaviour.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "redis/cross_slot.h"
#include "redis_cluster.h"
#include "redis_sentinel.h"
#include "redis_server.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"

namespace sluice::testing {

inline constexpr Micros kSec = 1'000'000;
// 2026-07-30 12:00:00 UTC, a minute boundary.
inline constexpr Micros kNoon = 1785412800LL * kSec;

// One server for the whole test binary; a failure to start fails every test using it.
inline RedisServer* SharedRedis() {
  static Result<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  if (!server.ok()) {
    ADD_FAILURE() << "cannot start redis-server: " << server.status().ToString();
    return nullptr;
  }
  return server->get();
}

#ifdef SLUICE_TESTS_ON_CLUSTER
// One cluster for the whole test binary; a failure to start fails every test using it.
inline RedisCluster* SharedCluster() {
  static Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start();
  if (!cluster.ok()) {
    ADD_FAILURE() << "cannot start a Redis Cluster: " << cluster.status().ToString();
    return nullptr;
  }
  return cluster->get();
}

// The URL of the Redis under test, emptied (every primary flushed).
inline Result<std::string> FlushedRedisUrl() {
  RedisCluster* cluster = SharedCluster();
  if (cluster == nullptr) return Status::Unavailable("no cluster");
  if (Status s = cluster->FlushAll(); !s.ok()) return s;
  return cluster->Url();
}
inline constexpr const char* kRedisBackendName = "cluster";

// The differential reference on a cluster: a MemoryStore that evaluates a batch
// spanning hash slots exactly as RedisStore must on a cluster (redis/cross_slot.h):
// one atomic evaluation per slot, and a refund of the slots that consumed when another
// slot denied. Single-slot batches go straight to the MemoryStore.
class SlotSplitMemoryStore final : public Store {
 public:
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
    const std::span<const StoreCheck> checks = batch.checks;
    const Micros now = batch.now;
    if (redis::CountSlots(checks) <= 1) return memory_.Run(batch, out);
    Status result = Status::Internal("no answer");
    redis::EvaluateAcrossSlots(
        checks, redis::DeadlineAfter(60'000'000),
        [&](std::span<const StoreCheck> c, redis::Deadline, redis::EvaluateCallback cb) {
          memory_.RunAsync({.checks = c, .now = now}, std::move(cb));
        },
        [&](std::span<const StoreCheck> c, redis::Deadline, redis::RefundCallback cb) {
          memory_.RunAsync(
              {.op = StoreOp::kRefund, .checks = c, .now = now},
              [cb = std::move(cb)](const Status& s, std::span<const Decision>) { cb(s); });
        },
        [&](const Status& s, std::span<const Decision> d) {  // inline: MemoryStore is
          result = s;
          std::copy(d.begin(), d.end(), out.begin());
        });
    return result;
  }
  Status Refund(std::span<const StoreCheck> checks, Micros now) {
    if (redis::CountSlots(checks) <= 1)
      return memory_.Run({.op = StoreOp::kRefund, .checks = checks, .now = now}, {});
    Status result = Status::Internal("no answer");
    redis::RefundAcrossSlots(
        checks, redis::DeadlineAfter(60'000'000),
        [&](std::span<const StoreCheck> c, redis::Deadline, redis::RefundCallback cb) {
          memory_.RunAsync(
              {.op = StoreOp::kRefund, .checks = c, .now = now},
              [cb = std::move(cb)](const Status& s, std::span<const Decision>) { cb(s); });
        },
        [&](const Status& s) { result = s; });
    return result;
  }
  Status Reset(const Policy& policy, std::string_view key) override {
    return memory_.Reset(policy, key);
  }

 private:
  MemoryStore memory_;
};
using DifferentialMemoryStore = SlotSplitMemoryStore;
#else
// What the differential test compares Redis with.
using DifferentialMemoryStore = MemoryStore;
inline Result<std::string> FlushedRedisUrl() {
  RedisServer* server = SharedRedis();
  if (server == nullptr) return Status::Unavailable("no redis-server");
  auto flushed = server->Command({"FLUSHALL"});
  if (!flushed.ok()) return flushed.status();
  return server->Url();
}
inline constexpr const char* kRedisBackendName = "redis";
#endif

struct MemoryBackend {
  static constexpr const char* kName = "memory";
  static std::shared_ptr<Store> Make() { return std::make_shared<MemoryStore>(); }
};

// A RedisStore on `url` in caller-time mode, patient on a loaded machine (null, with a
// failure, when it cannot be made).
inline std::shared_ptr<Store> CallerTimeStore(std::string url) {
  RedisStoreOptions o;
  o.url = std::move(url);
  o.use_caller_time = true;
  o.call_timeout = kPatientCallTimeout;
  o.connect_timeout = 10'000'000;  // the handshake too, on a loaded machine
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::shared_ptr<Store>(*store) : nullptr;
}

struct RedisBackend {
  static constexpr const char* kName = kRedisBackendName;
  static std::shared_ptr<Store> Make() {
    auto url = FlushedRedisUrl();
    EXPECT_TRUE(url.ok()) << url.status().ToString();
    if (!url.ok()) return nullptr;
    return CallerTimeStore(*url);
  }
};

// The commands of docs/redis.md's ACL user for sluice ("An ACL user for sluice", for a
// standalone Redis), one per entry; its key pattern is ~sluice:*. Keep the two in step
// (acl_test.cc takes each one away in turn).
inline const std::vector<std::string> kDocumentedAclCommands = {
    "+evalsha",    "+script|load", "+ping",    "+select",        "+del",
    "+get",        "+set",         "+pexpire", "+time",          "+zadd",
    "+zrange",     "+zrem",        "+zcard",   "+zrangebyscore", "+zremrangebyscore",
    "+config|get", "+setrange",    "+incrby"};

// `ACL SETUSER <user>` with that user's rules (its password, its keys, its commands),
// then `extra`.
inline std::vector<std::string> DocumentedAclUser(const std::string& user,
                                                  const std::string& password,
                                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> cmd = {"ACL", "SETUSER", user, "on", ">" + password, "~sluice:*"};
  cmd.insert(cmd.end(), kDocumentedAclCommands.begin(), kDocumentedAclCommands.end());
  cmd.insert(cmd.end(), extra.begin(), extra.end());
  return cmd;
}

// The native module's calls `server` ran (SLUICE.DECIDE, and SLUICE.DECIDE1 for one
// check on one key on the server's clock): -1 or less when it did not answer.
inline long long ModuleCalls(const RedisServer& server) {
  return server.CommandCalls("sluice.decide") + server.CommandCalls("sluice.decide1");
}

#ifdef SLUICE_REDIS_MODULE
// RedisStore on a redis-server with the native module loaded (src/redis/module),
// started once per test binary and emptied before each test: the module decides every
// check it can (docs/redis.md, "The native module"), the scripts the others.
struct ModuleBackend {
  static constexpr const char* kName = "module";
  static std::shared_ptr<Store> Make() {
    static Result<std::unique_ptr<RedisServer>> server = [] {
      RedisServerOptions o;
      o.args = {"--loadmodule", SLUICE_REDIS_MODULE};
      return RedisServer::Start(std::move(o));
    }();
    if (!server.ok()) {
      ADD_FAILURE() << "cannot start redis-server with the module: " << server.status().ToString();
      return nullptr;
    }
    auto flushed = (*server)->Command({"FLUSHALL"});
    EXPECT_TRUE(flushed.ok()) << flushed.status().ToString();
    return CallerTimeStore((*server)->Url());
  }
};
#endif

// RedisStore through a Sentinel group (1 primary, 1 replica, 3 sentinels), started once
// per test binary: the store discovers the primary from the sentinels.
// The data nodes and the sentinels have passwords of their own, so every test on it
// also checks that the two sets of credentials go where they belong.
inline RedisSentinelGroup* SharedSentinelGroup() {
  static Result<std::unique_ptr<RedisSentinelGroup>> group = [] {
    RedisSentinelGroupOptions o;
    o.password = "node-secret";
    o.sentinel_password = "sentinel-secret";
    return RedisSentinelGroup::Start(o);
  }();
  if (!group.ok()) {
    ADD_FAILURE() << "cannot start the sentinel group: " << group.status().ToString();
    return nullptr;
  }
  return group->get();
}

struct SentinelBackend {
  static constexpr const char* kName = "sentinel";
  static std::shared_ptr<Store> Make() {
    RedisSentinelGroup* group = SharedSentinelGroup();
    if (group == nullptr) return nullptr;
    auto flushed = group->primary().Command({"FLUSHALL"});
    EXPECT_TRUE(flushed.ok()) << flushed.status().ToString();
    return CallerTimeStore(group->Url());
  }
};

}  // namespace sluice::testing

#ifndef SLUICE_SUITE_BACKENDS
#define SLUICE_SUITE_BACKENDS MemoryBackend, RedisBackend
#endif
#ifndef SLUICE_DIFFERENTIAL_BACKEND
#define SLUICE_DIFFERENTIAL_BACKEND RedisBackend
#endif
