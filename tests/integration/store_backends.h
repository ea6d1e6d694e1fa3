// Store backends for typed tests: the same test body runs against MemoryStore and
// against RedisStore on a real redis-server (started once per test binary, emptied
// before each test). Redis runs in caller-time mode so a ManualClock drives both.
// A test binary can run the shared suites on another topology by defining
// SLUICE_SUITE_BACKENDS / SLUICE_DIFFERENTIAL_BACKEND (the sentinel suites do).
#pragma once

#include <gtest/gtest.h>

#include <memory>

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

struct MemoryBackend {
  static constexpr const char* kName = "memory";
  static std::shared_ptr<Store> Make() { return std::make_shared<MemoryStore>(); }
};

struct RedisBackend {
  static constexpr const char* kName = "redis";
  static std::shared_ptr<Store> Make() {
    RedisServer* server = SharedRedis();
    if (server == nullptr) return nullptr;
    auto flushed = server->Command({"FLUSHALL"});
    EXPECT_TRUE(flushed.ok()) << flushed.status().ToString();
    RedisStoreOptions o;
    o.url = server->Url();
    o.use_caller_time = true;
    o.call_timeout = 5'000'000;  // tests assert behaviour, not speed
    o.on_warning = [](std::string_view) {};
    auto store = RedisStore::Create(std::move(o));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::shared_ptr<Store>(*store) : nullptr;
  }
};

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
    RedisStoreOptions o;
    o.url = group->Url();
    o.use_caller_time = true;
    o.call_timeout = 5'000'000;  // tests assert behaviour, not speed
    o.on_warning = [](std::string_view) {};
    auto store = RedisStore::Create(std::move(o));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::shared_ptr<Store>(*store) : nullptr;
  }
};

}  // namespace sluice::testing

#ifndef SLUICE_SUITE_BACKENDS
#define SLUICE_SUITE_BACKENDS MemoryBackend, RedisBackend
#endif
#ifndef SLUICE_DIFFERENTIAL_BACKEND
#define SLUICE_DIFFERENTIAL_BACKEND RedisBackend
#endif
