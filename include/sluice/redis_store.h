// sluice/redis_store.h: state in Redis, shared by every process that points at it.
//
// Each decision (a batch of up to kMaxBatchChecks checks) is one EVALSHA of one Lua script that
// reads, decides and writes every key of the batch atomically on Redis's own clock
// (TIME), setting the TTL of every key it writes. Concurrent callers share a few
// connections: their commands are pipelined. docs/redis.md describes key layout,
// failure modes and the Redis settings to use.
//
//   auto redis = sluice::RedisStore::Create({.url = "redis://10.0.0.5:6379"});
//   if (!redis.ok()) { /* redis.status().message() says what is wrong */ }
//   options.store = *redis;   // LimiterOptions: the one line that switches to Redis
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/store.h"

namespace sluice {

struct RedisStoreOptions {
  // One of (docs/redis.md, "URLs"):
  //   redis://[user:password@]host:port[/db]       unix:///path/to/socket[?db=N]
  //   rediss://[user:password@]host:port[/db]      (TLS)
  //   redis-cluster://[user:password@]host:port[,host:port...]
  //   redis-sentinel://[user:password@]host:port[,host:port...]/MASTER_NAME[?db=N]
  //   rediss-cluster://..., rediss-sentinel://...  (TLS)
  // with optional query parameters tls_ca, tls_cert, tls_key, tls_sni, tls_insecure=1,
  // sentinel_user, sentinel_password, db.
  std::string url = "redis://127.0.0.1:6379";
  // The same settings as fields. A field that is set (non-empty, or true) wins over
  // the URL's query parameter of the same name; the merged result is validated as a
  // whole (e.g. tls_ca on a redis:// URL is InvalidArgument naming tls_ca).
  std::string tls_ca;         // CA bundle (PEM) verifying the server; default: the system's
  std::string tls_cert;       // client certificate (PEM) for mTLS; needs tls_key
  std::string tls_key;        // its private key (PEM); needs tls_cert
  std::string tls_sni;        // server name to send and verify; default: the URL's host
  bool tls_insecure = false;  // skip certificate verification (tests, mismatched names)
  std::string sentinel_user;  // ACL user on the sentinels (not on the data nodes)
  std::string sentinel_password;
  // Bound on establishing a connection (also used by background reconnects).
  Micros connect_timeout = 1'000'000;
  // Every call returns within this deadline, whatever Redis does. A call that timed
  // out is never retried (it may have run). A connection whose oldest command is
  // still unanswered max(1 s, 4 x call_timeout) past its deadline (a stopped server)
  // is dropped and reconnected in the background.
  Micros call_timeout = 50'000;
  // Connections (1-64) shared by all callers; concurrent calls are pipelined on them.
  // While a connection is down, calls on it fail at once (kUnavailable): nothing is
  // queued to replay later.
  int connections = 2;
  // True: Create fails unless every connection can be established now. False
  // (degraded start, e.g. a daemon that must come up while Redis is down): Create
  // validates the options and tries one connection; if the server is unreachable it
  // returns anyway, connections are made in the background and calls fail with
  // kUnavailable until one is up. A server that answers but refuses (wrong password,
  // bad database) is still Create's error: waiting would not fix it.
  bool require_connection = true;
  // Coalescing (docs/redis.md, "Coalesced calls"): the decisions queued on one
  // connection at the same moment (concurrent callers; 8 or more, or this many if
  // fewer) are sent as ONE script call of up to this many callers' batches, each still decided all
  // or nothing and answered on its own, each caller keeping its own deadline. On Redis Cluster only
  // batches of one hash slot share a call. 1 turns it off (one script call per decision). 2-256.
  int coalesce = 32;
  // Tests only: scripts use the `now` the caller passes instead of Redis's TIME, so a
  // request sequence can be replayed identically against MemoryStore. TTLs are then
  // padded by an hour, since Redis expires keys on its own clock.
  bool use_caller_time = false;
  // Receives warnings (e.g. a maxmemory-policy that may evict limiter keys).
  // Default: written to stderr.
  std::function<void(std::string_view)> on_warning;
};

// Operational counters. Monotonic.
struct RedisStoreStats {
  std::uint64_t calls = 0;           // evaluations sent (batches, not checks)
  std::uint64_t errors = 0;          // evaluations that failed (timeouts included)
  std::uint64_t timeouts = 0;        // evaluations and refunds a caller saw time out
  std::uint64_t script_reloads = 0;  // NOSCRIPT answered and the script loaded again
  std::uint64_t reconnects = 0;      // connections re-established after a loss
  // Redis Cluster only (0 otherwise):
  std::uint64_t moved = 0;               // MOVED redirects followed (slot patched, resent)
  std::uint64_t ask = 0;                 // ASK redirects followed (ASKING + resent)
  std::uint64_t cluster_retries = 0;     // resent after TRYAGAIN/CLUSTERDOWN/LOADING/READONLY,
                                         // or once a newly known primary was connected
  std::uint64_t topology_refreshes = 0;  // slot map reads (startup, MOVED, failover)
  std::uint64_t cross_slot_refunds = 0;  // slots refunded: another slot of the batch denied
  // Coalescing (RedisStoreOptions::coalesce): script calls that carried several
  // evaluations, and how many evaluations (of `calls`) they carried. Script calls sent
  // = calls - coalesced_evaluations + coalesced_calls.
  std::uint64_t coalesced_calls = 0;
  std::uint64_t coalesced_evaluations = 0;
};

// Thread-safe. Decisions never throw.
class RedisStore final : public Store {
 public:
  // Parses the URL, opens every connection (AUTH, SELECT), loads the script and
  // checks maxmemory-policy (a warning if Redis may evict keys). Errors name what is
  // wrong: InvalidArgument for a malformed URL, a wrong or missing password or a bad
  // database; Unavailable for a refused connection, a timeout, or a server that does
  // not speak Redis.
  static Result<std::shared_ptr<RedisStore>> Create(RedisStoreOptions options);
  // Fails calls still in flight with kUnavailable and joins the I/O threads. When a
  // `done` callback drops the last reference, that teardown finishes on another thread
  // once the callback has returned (a thread cannot join itself).
  ~RedisStore() override;

  // Store::Run: one script call per batch (atomic), blocking; returns within
  // call_timeout. Errors: InvalidArgument (ValidateBatch), DeadlineExceeded (the script
  // may have run), Unavailable (not connected, or Redis answered an error such as OOM).
  Status Run(const StoreBatch& batch, std::span<Decision> out) override;
  // Non-blocking: queues the script and returns; `done` is called exactly once, by
  // call_timeout at the latest, on an internal thread: a connection's I/O thread
  // (replies, timeouts, a lost connection) or the store's completion thread (failures
  // known at once, e.g. not connected). Never on the calling thread — except invalid
  // input (InvalidArgument), reported inline — so `done` may call RunAsync again
  // without starving reconnection. It must not block. This is the API for load
  // generators: thousands of calls in flight share the connections' pipelines.
  void RunAsync(const StoreBatch& batch, RunCallback done) override;
  // Deletes the key's state (one DEL). Blocking, bounded by call_timeout.
  Status Reset(const Policy& policy, std::string_view key) override;
  bool IsRemote() const override { return true; }

  RedisStoreStats Stats() const;

 private:
  // The kRefund batch: the batch script with negated costs, blocking.
  Status Refund(std::span<const StoreCheck> checks, Micros now);

  struct Impl;
  explicit RedisStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens a store from a URL: "memory://" (or an empty string) for a new MemoryStore,
// any Redis URL form (redis://, rediss://, unix://, redis-cluster://...) for a RedisStore with
// default options. Errors as Create, or InvalidArgument for any other scheme.
Result<std::shared_ptr<Store>> OpenStore(std::string_view url);

}  // namespace sluice
