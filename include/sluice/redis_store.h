// sluice/redis_store.h: state in Redis, shared by every process that points at it.
//
// Each decision is one EVALSHA of a small Lua script that reads, decides and writes
// atomically on Redis's own clock (TIME), setting the TTL of every key it writes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/store.h"

namespace sluice {

struct RedisStoreOptions {
  // redis://[user:password@]host:port[/db] or unix:///path/to/socket[?db=N].
  std::string url = "redis://127.0.0.1:6379";
  // Bound on establishing a connection (also used by background reconnects).
  Micros connect_timeout = 1'000'000;
  // Every call returns within this deadline, whatever Redis does. A call that timed
  // out is never retried (it may have run).
  Micros call_timeout = 50'000;
  // Connections shared by all callers; concurrent calls are pipelined on them.
  int connections = 2;
  // Tests only: scripts use the `now` the caller passes instead of Redis's TIME, so a
  // request sequence can be replayed identically against MemoryStore.
  bool use_caller_time = false;
  // Receives warnings (e.g. a maxmemory-policy that may evict limiter keys).
  // Default: written to stderr.
  std::function<void(std::string_view)> on_warning;
};

// Operational counters. Monotonic.
struct RedisStoreStats {
  std::uint64_t calls = 0;
  std::uint64_t errors = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t script_reloads = 0;  // NOSCRIPT answered and the script loaded again
  std::uint64_t reconnects = 0;
};

class RedisStore final : public Store {
 public:
  // Parses the URL, connects (AUTH, SELECT), loads the scripts and checks
  // maxmemory-policy. Errors name what is wrong: a malformed URL, a refused
  // connection, a wrong password, a server that does not speak Redis.
  static Result<std::shared_ptr<RedisStore>> Create(RedisStoreOptions options);
  ~RedisStore() override;

  Status Evaluate(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out) override;
  void EvaluateAsync(std::span<const StoreCheck> checks, Micros now,
                     EvaluateCallback done) override;
  Status Reset(const Policy& policy, std::string_view key) override;
  bool IsRemote() const override { return true; }

  RedisStoreStats Stats() const;

  struct Impl;

 private:
  explicit RedisStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens a store from a URL: "memory://" (or an empty string) for a new MemoryStore,
// redis:// or unix:// for a RedisStore with default options.
Result<std::shared_ptr<Store>> OpenStore(std::string_view url);

}  // namespace sluice
