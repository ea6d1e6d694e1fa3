// RedisStore: one EVALSHA per batch (of the one-check script of its algorithm when
// the batch has one check, of the batch script otherwise), pipelined over a few
// shared connections. See docs/redis.md.
#include "sluice/redis_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "core/algorithms.h"
#include "redis/cluster_router.h"
#include "redis/cluster_slots.h"
#include "redis/cross_slot.h"
#include "redis/router.h"
#include "redis/scripts.h"
#include "redis/sentinel_router.h"
#include "redis/standalone_router.h"
#include "redis/url.h"
#include "redis/waiter.h"
#include "sluice/memory_store.h"

namespace sluice {

using redis::EvaluateCallback;
using redis::RefundCallback;

namespace {

constexpr std::size_t kMaxBatch = kMaxBatchChecks;
// Fewer batches queued together than this are sent one call each: the coalesced
// script's fixed cost per call (its body defines every algorithm, about 5 us of Redis
// CPU) would outweigh the per-call cost merging saves (about 1 us per batch against
// the lean one-check scripts), and at low load merged calls measured a worse p99
// (docs/benchmarks.md, "Coalesced calls").
constexpr std::size_t kMinCoalescedBatches = 8;
// Caller-time mode (tests): TTLs are padded so that Redis's own expiry, which runs on
// its clock, never drops state that the caller's clock still needs.
constexpr long long kCallerTimeTtlPadMs = 3'600'000;

struct Batch {
  Status status;
  Decision decisions[kMaxBatch];
  std::size_t n = 0;
};

// What a call in flight needs to finish: each check's capacity (Decision::limit).
struct Call {
  std::uint64_t capacity[kMaxBatch];
  std::size_t n = 0;
  // Set by whoever counts this call's timeout first: the reply callback (the I/O
  // thread's deadline passed) or a blocking caller whose wait ended first. Each
  // timeout a caller sees is counted exactly once.
  std::atomic<bool> timeout_counted{false};
};

std::size_t EncodeCoalesced(bool caller_time, const std::vector<const redis::CoalesceInfo*>& groups,
                            std::string& out);

// Merges the RedisStoreOptions fields into the parsed URL: a field that is set wins.
void MergeFields(const RedisStoreOptions& o, redis::Url* u) {
  if (!o.tls_ca.empty()) u->tls.ca_file = o.tls_ca;
  if (!o.tls_cert.empty()) u->tls.cert_file = o.tls_cert;
  if (!o.tls_key.empty()) u->tls.key_file = o.tls_key;
  if (!o.tls_sni.empty()) u->tls.sni = o.tls_sni;
  if (o.tls_insecure) u->tls.insecure = true;
  if (!o.sentinel_user.empty()) u->sentinel_user = o.sentinel_user;
  if (!o.sentinel_password.empty()) u->sentinel_password = o.sentinel_password;
}

}  // namespace

struct RedisStore::Impl {
  RedisStoreOptions options;
  std::atomic<std::uint64_t> calls{0}, errors{0}, timeouts{0}, cross_slot_refunds{0};
  bool cluster = false;  // keys may live in different hash slots
  // The grouped script that merged calls run (connection.h, "Coalescing"); its
  // max_groups is options.coalesce (1: off).
  redis::CoalesceTarget coalesce_target{};
  // Last, so it is destroyed first: its shutdown completes calls in flight, whose
  // callbacks still use the members above.
  std::unique_ptr<redis::Router> router;

  void Warn(const std::string& message) const {
    if (options.on_warning) {
      options.on_warning(message);
    } else {
      std::fprintf(stderr, "sluice: warning: %s\n", message.c_str());
    }
  }

  void CheckMaxmemory(redis::NodeClient& node);
  Status CheckEvalsha(redis::NodeClient& node, const std::string& user) const;
  void CountTimeout(Call& call) {
    if (!call.timeout_counted.exchange(true, std::memory_order_acq_rel)) {
      timeouts.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // RunAsync with the deadline given; returns the call (null if it failed at
  // once) so that a blocking caller can count its own timeout.
  // `op`: every operation but kRefund (Refund below).
  std::shared_ptr<Call> Evaluate(StoreOp op, std::span<const StoreCheck> checks, Micros now,
                                 redis::Deadline deadline, EvaluateCallback done);
  std::shared_ptr<Call> Refund(std::span<const StoreCheck> checks, Micros now,
                               redis::Deadline deadline, RefundCallback done);
  // Sends one EVALSHA of `script` (loaded on NOSCRIPT by the router) and hands the
  // parsed decisions (call->n of them) to `done`.
  void Run(std::string_view routing_key, const redis::Script& script, std::string wire,
           std::shared_ptr<Call> call, redis::Deadline deadline, EvaluateCallback done,
           redis::CoalesceInfo merge = {});
};

// A user that may not run EVALSHA cannot decide anything: refuse it at Create rather
// than fail every call. EVALSHA of an unknown SHA with no keys runs nothing: NOSCRIPT
// when the user may run it, NOPERM when not.
Status RedisStore::Impl::CheckEvalsha(redis::NodeClient& node, const std::string& user) const {
  const redis::Deadline deadline = redis::DeadlineAfter(options.connect_timeout);
  auto r = node.Call(
      redis::Command{redis::EncodeCommand({"EVALSHA", std::string(40, '0'), "0"}), {}}, deadline);
  // Not reachable (or degraded start): the calls will say so; only a refusal is final.
  if (!r.ok()) return Status::Ok();
  if (r->is_error() && r->str.starts_with("NOPERM")) {
    return Status::InvalidArgument("user '" + (user.empty() ? std::string("default") : user) +
                                   "' may not run evalsha on " + node.url().Describe() + ": " +
                                   r->str + " (docs/redis.md lists the ACL sluice needs)");
  }
  return Status::Ok();
}

// Eviction would silently forget counters (letting more requests through), so only
// noeviction (writes fail instead, and the failure mode decides) is safe.
void RedisStore::Impl::CheckMaxmemory(redis::NodeClient& node) {
  // Startup only: a generous bound, so a busy Redis does not produce a false warning.
  const redis::Deadline deadline =
      redis::DeadlineAfter(std::max<Micros>(options.connect_timeout, 2'000'000));
  auto policy =
      node.Call({redis::EncodeCommand({"CONFIG", "GET", "maxmemory-policy"}), {}}, deadline);
  if (!policy.ok() || policy->is_error() || policy->elements.size() != 2) {
    Warn("could not read maxmemory-policy from " + node.url().Describe() + " (" +
         (policy.ok() ? policy->str : policy.status().message()) +
         "); sluice needs it to be noeviction, or keys may be evicted and limits reset");
    return;
  }
  const std::string& value = policy->elements[1].str;
  if (value == "noeviction") return;
  auto limit = node.Call({redis::EncodeCommand({"CONFIG", "GET", "maxmemory"}), {}}, deadline);
  if (limit.ok() && !limit->is_error() && limit->elements.size() == 2 &&
      limit->elements[1].str == "0") {
    return;  // no memory limit: nothing is ever evicted
  }
  Warn("Redis at " + node.url().Describe() + " has maxmemory-policy " + value +
       ": when memory is full it may evict sluice's keys (all of them have a TTL, so "
       "volatile-* policies evict them too), which resets those limits. Use noeviction, "
       "or a Redis of its own for sluice");
}

Result<std::shared_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  if (options.connect_timeout <= 0) {
    return Status::InvalidArgument("RedisStoreOptions.connect_timeout must be > 0");
  }
  if (options.call_timeout <= 0) {
    return Status::InvalidArgument("RedisStoreOptions.call_timeout must be > 0");
  }
  if (options.coalesce < 1 || options.coalesce > 256) {
    return Status::InvalidArgument("RedisStoreOptions.coalesce must be 1-256 (got " +
                                   std::to_string(options.coalesce) + "; 1 turns coalescing off)");
  }
  if (options.connections < 1 || options.connections > 64) {
    return Status::InvalidArgument("RedisStoreOptions.connections must be 1-64 (got " +
                                   std::to_string(options.connections) + ")");
  }
  auto url = redis::ParseUrl(options.url, /*validate=*/false);
  if (!url.ok()) return url.status();
  MergeFields(options, &*url);
  if (Status s =
          redis::Validate(*url, "bad Redis settings (URL '" + redis::MaskPasswords(options.url) +
                                    "' with the RedisStoreOptions fields)");
      !s.ok()) {
    return s;
  }
  redis::NodeOptions no;
  no.connect.handshake.url = *url;
  no.connect.handshake.connect_timeout = options.connect_timeout;
  no.connect.handshake.scripts = redis::AllScripts();
  no.connect.stall_timeout = std::max<Micros>(1'000'000, 4 * options.call_timeout);
  no.connections = options.connections;
  no.connect_now = options.require_connection;
  std::unique_ptr<redis::Router> router;
  if (url->topology == redis::Topology::kSentinel) {
    redis::SentinelRouterOptions so;
    so.sentinel.sentinels = url->endpoints;
    so.sentinel.master_name = url->master_name;
    so.sentinel.user = url->sentinel_user;
    so.sentinel.password = url->sentinel_password;
    so.sentinel.tls = url->tls;
    so.sentinel.connect_timeout = options.connect_timeout;
    so.node = std::move(no);
    so.describe = url->Describe();
    auto sentinel = redis::SentinelRouter::Create(std::move(so));
    if (!sentinel.ok()) return sentinel.status();
    router = std::move(*sentinel);
  } else if (url->topology == redis::Topology::kCluster) {
    auto cluster = redis::ClusterRouter::Create(std::move(no));
    if (!cluster.ok()) return cluster.status();
    router = std::move(*cluster);
  } else {
    auto standalone = redis::StandaloneRouter::Create(std::move(no));
    if (!standalone.ok()) return standalone.status();
    router = std::move(*standalone);
  }
  auto impl = std::make_unique<Impl>();
  impl->coalesce_target = {
      redis::CoalescedScript().sha, redis::CoalescedScript().source,
      static_cast<std::size_t>(options.coalesce),
      std::min(kMinCoalescedBatches, static_cast<std::size_t>(options.coalesce)),
      [caller_time = options.use_caller_time](const std::vector<const redis::CoalesceInfo*>& groups,
                                              std::string& out) {
        return EncodeCoalesced(caller_time, groups, out);
      }};
  impl->options = std::move(options);
  impl->router = std::move(router);
  Status usable;
  impl->router->ForEachPrimary([&](redis::NodeClient& node) {
    if (Status s = impl->CheckEvalsha(node, url->user); !s.ok() && usable.ok()) usable = s;
  });
  if (!usable.ok()) return usable;
  impl->cluster = url->topology == redis::Topology::kCluster;
  int checked = 0;
  impl->router->ForEachPrimary([&](redis::NodeClient& node) {
    impl->CheckMaxmemory(node);
    ++checked;
  });
  if (checked == 0) {  // degraded start on a cluster that no seed answered for yet
    impl->Warn("could not read maxmemory-policy: no primary of " + url->Describe() +
               " is reachable yet; sluice needs it to be noeviction, or keys may be "
               "evicted and limits reset");
  }
  return std::shared_ptr<RedisStore>(new RedisStore(std::move(impl)));
}

namespace {

// Coalesced calls (lua/coalesced.lua). A check's number there packs its cost, its
// policy's index in the call and the end of its batch: (cost * 4096 + policy) * 2 +
// last, exact in a Lua double for costs below 2^40 (a call with a larger cost is sent
// alone). 4096 policies: at most 256 batches of 16 checks.
constexpr std::uint64_t kMaxCoalescedCost = std::uint64_t{1} << 40;

// What the encoder below needs of one batch (CoalesceInfo::data): its now, then six
// numbers per check (algorithm, limit, window, capacity, initial tokens, cost).
void GroupData(std::span<const StoreCheck> checks, Micros now, redis::CoalesceInfo& merge) {
  std::vector<long long>& d = merge.data;
  d.reserve(1 + 6 * checks.size());
  d.push_back(static_cast<long long>(now));
  for (const StoreCheck& c : checks) {
    const Policy& p = *c.policy;
    d.push_back(static_cast<long long>(p.algorithm));
    d.push_back(static_cast<long long>(p.limit));
    d.push_back(static_cast<long long>(p.window));
    d.push_back(static_cast<long long>(p.Capacity()));
    d.push_back(p.initial_tokens ? static_cast<long long>(*p.initial_tokens) : -1LL);
    d.push_back(static_cast<long long>(c.cost));
  }
  merge.nreplies = static_cast<std::uint32_t>(4 * checks.size());
}

// Where the KEYS of an EVALSHA are in its wire (`*N $7 EVALSHA $40 sha $k nkeys` and
// then the keys, each `$len\r\n` + bytes + `\r\n`), whatever the script's ARGV layout.
void FindKeys(const std::string& wire, std::size_t nkeys, redis::CoalesceInfo& merge) {
  std::size_t at = wire.find('\n') + 1;  // after the array header
  auto skip = [&wire, &at] {             // one bulk string
    const std::size_t eol = wire.find('\n', at);
    std::size_t len = 0;
    std::from_chars(wire.data() + at + 1, wire.data() + eol - 1, len);
    at = eol + 1 + len + 2;
  };
  for (int i = 0; i < 3; ++i) skip();  // EVALSHA, sha, nkeys
  merge.keys_begin = static_cast<std::uint32_t>(at);
  for (std::size_t i = 0; i < nkeys; ++i) skip();
  merge.keys_end = static_cast<std::uint32_t>(at);
  merge.nkeys = static_cast<std::uint32_t>(nkeys);
}

void AppendBulk(std::string& out, std::string_view v) {
  out.push_back('$');
  out.append(std::to_string(v.size()));
  out.append("\r\n");
  out.append(v);
  out.append("\r\n");
}

void AppendNumber(std::string& out, long long v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  AppendBulk(out, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

// The ARGV of a coalesced call (lua/coalesced.lua's layout): the clock mode, the TTL
// pad, the call's distinct policies, then one number per check (and each batch's now
// before its checks in caller-time mode). Returns the number of arguments.
std::size_t EncodeCoalesced(bool caller_time, const std::vector<const redis::CoalesceInfo*>& groups,
                            std::string& out) {
  struct Numbers {
    long long v[5];
  };
  std::vector<Numbers> policies;
  std::vector<std::uint32_t> index;
  for (const redis::CoalesceInfo* g : groups) {
    for (std::size_t at = 1; at + 6 <= g->data.size(); at += 6) {
      const long long* p = g->data.data() + at;
      std::size_t i = 0;
      while (i < policies.size() && !std::equal(p, p + 5, policies[i].v)) ++i;
      if (i == policies.size()) {
        Numbers n;
        std::copy(p, p + 5, n.v);
        policies.push_back(n);
      }
      index.push_back(static_cast<std::uint32_t>(i));
    }
  }
  AppendBulk(out, caller_time ? "c" : "");
  AppendNumber(out, caller_time ? kCallerTimeTtlPadMs : 0);
  AppendNumber(out, static_cast<long long>(policies.size()));
  for (const Numbers& n : policies) {
    for (long long v : n.v) AppendNumber(out, v);
  }
  std::size_t count = 3 + 5 * policies.size(), check = 0;
  for (const redis::CoalesceInfo* g : groups) {
    if (caller_time) {
      AppendNumber(out, g->data[0]);
      ++count;
    }
    for (std::size_t at = 1; at + 6 <= g->data.size(); at += 6) {
      const long long cost = g->data[at + 5];
      const long long last = at + 12 > g->data.size() ? 1 : 0;
      AppendNumber(out, (cost * 4096 + index[check++]) * 2 + last);
      ++count;
    }
  }
  return count;
}

// A check's extensions (lua/dispatch.lua's 7th argument per check, read by the scripts
// as `c.x`; docs/redis.md, "Check extensions"): ';'-separated 'k=v' items for what a
// plain decision does not need, or "" for a plain check. Each feature appends its own
// items, one letter each. A check with extensions runs the batch script: the one-check
// scripts and coalesced calls take plain checks only, so the common call stays lean.
void AppendExt(const StoreCheck& c, StoreOp op, std::string& out) {
  // --- concurrency limits (issue #12 item 1): e = the permit op (a: acquire or peek,
  // r: release, x: extend), p = the permit id (lua/concurrency.lua). Always present
  // for a concurrency check, so that it never takes a lean or coalesced script.
  if (c.policy->algorithm == Algorithm::kConcurrency) {
    if (!out.empty()) out.push_back(';');
    out.append(op == StoreOp::kRelease ? "e=r" : op == StoreOp::kExtend ? "e=x" : "e=a");
    if (!c.permit.empty()) {
      out.append(";p=");
      out.append(c.permit);
    }
  }
  // Blocks and penalties (issue #12; lua/penalties.lua): b = Policy::block_for in us,
  // f=1 a forced check (Limiter::Penalize).
  if (c.policy->block_for > 0) {
    if (!out.empty()) out.push_back(';');
    out.append("b=").append(std::to_string(c.policy->block_for));
  }
  if (op == StoreOp::kPenalize) {
    if (!out.empty()) out.push_back(';');
    out.append("f=1");
  }
  // -- Reservations (issue #12 item 2): w = max_wait in us, read by token_bucket.lua and
  // gcra.lua. Only they take future budget: a window algorithm's reservation is a plain
  // decision and stays on the lean script (as does a peek).
  if (c.max_wait > 0 && c.cost > 0 &&
      (c.policy->algorithm == Algorithm::kTokenBucket || c.policy->algorithm == Algorithm::kGcra)) {
    if (!out.empty()) out.push_back(';');
    out.append("w=");
    out.append(std::to_string(c.max_wait));
  }
  // --- carry-over (Policy::on_change; issue #12 item 4) ---
  // o=r (reset) or o=p (proportional); as_is, the default, sends nothing. The bodies
  // (lua/<algorithm>.lua) then record the parameters with the state they write and
  // convert a state recorded under others.
  if (c.policy->on_change != OnChange::kAsIs) {
    if (!out.empty()) out.push_back(';');
    out.append(c.policy->on_change == OnChange::kReset ? "o=r" : "o=p");
  }
}

// True when every check is plain (no extensions): only then may a call use a one-check
// script or be coalesced.
bool AllPlain(std::span<const StoreCheck> checks, StoreOp op) {
  std::string ext;
  for (const StoreCheck& c : checks) {
    AppendExt(c, op, ext);
    if (!ext.empty()) return false;
  }
  return true;
}

// EVALSHA of `script` over `checks`: KEYS are each check's key (and a sliding log's
// ":log" key, then a block policy's ":b" key), ARGV the clock mode and seven arguments per check
// (six numbers and the extensions). A refund negates every cost (lua/dispatch.lua) and expects an
// empty reply; a decision records each check's capacity in `call` (Decision::limit).
std::string EncodeEval(const redis::Script& script, std::span<const StoreCheck> checks, Micros now,
                       bool use_caller_time, StoreOp op, Call& call) {
  const bool refund = op == StoreOp::kRefund;
  std::size_t nkeys = 0;
  for (const StoreCheck& c : checks) {
    nkeys += c.policy->algorithm == Algorithm::kSlidingWindowLog ? 2 : 1;
    nkeys += c.policy->block_for > 0 ? 1 : 0;  // blocks: the block key (lua/penalties.lua)
  }
  redis::CommandBuilder b(3 + nkeys + 2 + 7 * checks.size());
  b.Add("EVALSHA").Add(script.sha).Add(static_cast<long long>(nkeys));
  std::string log_key, ext;
  for (const StoreCheck& c : checks) {
    b.Add(c.key);
    if (c.policy->algorithm == Algorithm::kSlidingWindowLog) {
      log_key.assign(c.key);
      log_key.append(":log");
      b.Add(log_key);
    }
    if (c.policy->block_for > 0) {  // declared, as Redis asks of every key a script uses
      log_key.assign(c.key);
      log_key.append(":b");
      b.Add(log_key);
    }
  }
  if (use_caller_time) {
    b.Add(static_cast<long long>(now)).Add(kCallerTimeTtlPadMs);
  } else {
    b.Add("").Add(0LL);
  }
  for (const StoreCheck& c : checks) {
    const Policy& p = *c.policy;
    const long long cost = static_cast<long long>(c.cost);
    b.Add(static_cast<long long>(p.algorithm))
        .Add(static_cast<long long>(p.limit))
        .Add(static_cast<long long>(p.window))
        .Add(static_cast<long long>(p.Capacity()))
        .Add(p.initial_tokens ? static_cast<long long>(*p.initial_tokens) : -1LL)
        .Add(refund ? -cost : cost);
    ext.clear();
    AppendExt(c, op, ext);
    b.Add(ext);
    if (!refund) call.capacity[call.n++] = p.Capacity();
  }
  return b.Take();
}

// EVALSHA of the one-check script of an O(1) algorithm (lua/single_head.lua): KEYS is
// the check's key, ARGV the clock mode, limit, window and cost, then the capacity for a
// token bucket or GCRA and the initial tokens for a token bucket: only what the
// algorithm reads (each argument costs Redis CPU). The reply's decoding needs the
// capacity, recorded in `call`.
std::string EncodeSingle(const redis::Script& script, const StoreCheck& c, Micros now,
                         bool use_caller_time, Call& call) {
  const Policy& p = *c.policy;
  const bool bucket = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra;
  const bool init = p.algorithm == Algorithm::kTokenBucket;
  redis::CommandBuilder b(4 + 4 + (bucket ? 1 : 0) + (init ? 1 : 0));
  b.Add("EVALSHA").Add(script.sha).Add(1LL).Add(c.key);
  if (use_caller_time) {
    b.Add(static_cast<long long>(now));
  } else {
    b.Add("");
  }
  b.Add(static_cast<long long>(p.limit))
      .Add(static_cast<long long>(p.window))
      .Add(static_cast<long long>(c.cost));
  if (bucket) b.Add(static_cast<long long>(p.Capacity()));
  if (init) b.Add(p.initial_tokens ? static_cast<long long>(*p.initial_tokens) : -1LL);
  call.capacity[call.n++] = p.Capacity();
  return b.Take();
}

}  // namespace

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() = default;

void RedisStore::Impl::Run(std::string_view routing_key, const redis::Script& script,
                           std::string wire, std::shared_ptr<Call> call, redis::Deadline deadline,
                           EvaluateCallback done, redis::CoalesceInfo merge) {
  auto on_reply = [this, call, done = std::move(done)](const Status& s, const redisReply* r) {
    if (!s.ok()) {
      errors.fetch_add(1, std::memory_order_relaxed);
      if (s.code() == ErrorCode::kDeadlineExceeded) CountTimeout(*call);
      done(s, {});
      return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      errors.fetch_add(1, std::memory_order_relaxed);
      done(Status::Unavailable("Redis answered: " + std::string(r->str, r->len)), {});
      return;
    }
    Batch out;
    out.n = call->n;
    if (Status d = redis::DecodeDecisions(*r, out.n, call->capacity, out.decisions); !d.ok()) {
      errors.fetch_add(1, std::memory_order_relaxed);
      done(d, {});
      return;
    }
    done(Status::Ok(), std::span<const Decision>(out.decisions, out.n));
  };
  router->Send(routing_key, redis::Command{std::move(wire), script.source, merge}, deadline,
               std::move(on_reply));
}

namespace {}  // namespace

void RedisStore::RunAsync(const StoreBatch& batch, RunCallback done) {
  const redis::Deadline deadline = redis::DeadlineAfter(impl_->options.call_timeout);
  if (batch.op == StoreOp::kRefund) {
    impl_->Refund(batch.checks, batch.now, deadline,
                  [done = std::move(done)](const Status& s) { done(s, {}); });
    return;
  }
  impl_->Evaluate(batch.op, batch.checks, batch.now, deadline, std::move(done));
}

std::shared_ptr<Call> RedisStore::Impl::Evaluate(StoreOp op, std::span<const StoreCheck> checks,
                                                 Micros now, redis::Deadline deadline,
                                                 EvaluateCallback done) {
  RedisStore::Impl* impl_ = this;
  if (Status s = ValidateBatch(StoreBatch{.op = op, .checks = checks, .now = now}); !s.ok()) {
    done(s, {});
    return nullptr;
  }
  if (checks.empty()) {
    done(Status::Ok(), {});
    return nullptr;
  }
  if (cluster && checks.size() > 1 && op == StoreOp::kPenalize && redis::CountSlots(checks) > 1) {
    // A penalty is applied whole, never undone by a refund: one slot only (the
    // Limiter's keys for one caller key share a hash tag).
    done(Status::InvalidArgument("a penalty's keys must be in one hash slot"), {});
    return nullptr;
  }
  if (cluster && checks.size() > 1 && op != StoreOp::kDecide && redis::CountSlots(checks) > 1) {
    // Release and extend apply per check: one call per slot would do, but a permit's keys
    // share the caller key's hash tag, so this does not arise (minimal adapter).
    done(Status::InvalidArgument("a permit operation's keys must be in one hash slot"), {});
    return nullptr;
  }
  if (cluster && checks.size() > 1 && redis::CountSlots(checks) > 1) {
    // --- concurrency limits: a permit cannot be refunded (only released), so a batch
    // with one must be atomic, in one slot (a Limiter's keys of one caller key are).
    for (const StoreCheck& c : checks) {
      if (c.policy->algorithm == Algorithm::kConcurrency) {
        done(Status::InvalidArgument("a batch with a check of concurrency policy '" +
                                     c.policy->name + "' must have all its keys in one hash slot"),
             {});
        return nullptr;
      }
    }
    // Keys in several hash slots: reserve per slot, refund if any slot denies
    // (redis/cross_slot.h). Each slot's part comes back here as a one-slot batch.
    redis::EvaluateAcrossSlots(
        checks, deadline,
        [this, now](std::span<const StoreCheck> c, redis::Deadline d, EvaluateCallback cb) {
          Evaluate(StoreOp::kDecide, c, now, d, std::move(cb));
        },
        [this, now](std::span<const StoreCheck> c, redis::Deadline d, RefundCallback cb) {
          cross_slot_refunds.fetch_add(1, std::memory_order_relaxed);
          Refund(c, now, d, std::move(cb));
        },
        std::move(done));
    return nullptr;
  }
  impl_->calls.fetch_add(1, std::memory_order_relaxed);
  // One check (the common call) runs its algorithm's lean script, which costs Redis a
  // fraction of the batch script's CPU (lua/single_head.lua); both take the same
  // arguments and give the same reply.
  // A check with extensions (AppendExt) always takes the batch script, uncoalesced.
  auto call = std::make_shared<Call>();
  const bool plain = AllPlain(checks, op);
  // (A lone concurrency check always has extensions, its permit: it runs a one-check
  // script of its own that takes the batch arguments, like the sliding log's.)
  const bool single =
      checks.size() == 1 && (plain || checks[0].policy->algorithm == Algorithm::kConcurrency);
  const redis::Script& script =
      single ? redis::SingleCheckScript(checks[0].policy->algorithm) : redis::BatchScript();
  // The sliding log's one-check script is the batch script's body (batch arguments).
  const bool lean =
      checks.size() == 1 && plain && checks[0].policy->algorithm != Algorithm::kSlidingWindowLog;
  std::string wire =
      lean ? EncodeSingle(script, checks[0], now, impl_->options.use_caller_time, *call)
           : EncodeEval(script, checks, now, impl_->options.use_caller_time, op, *call);
  // Coalescing: the connection may merge this call with others queued with it
  // (connection.h); on a cluster only with calls of the same slot.
  redis::CoalesceInfo merge;
  bool coalesce = options.coalesce > 1 && plain;
  for (const StoreCheck& c : checks) coalesce = coalesce && c.cost < kMaxCoalescedCost;
  if (coalesce) {
    merge.target = &coalesce_target;
    merge.slot = cluster ? redis::KeySlot(checks[0].key) : 0;
    std::size_t nkeys = 0;
    for (const StoreCheck& c : checks) {
      nkeys += c.policy->algorithm == Algorithm::kSlidingWindowLog ? 2 : 1;
    }
    FindKeys(wire, nkeys, merge);
    GroupData(checks, now, merge);
  }
  // Every key of a batch shares the hash tag of the first one (sluice keys carry
  // one), so the first key routes the whole script.
  impl_->Run(checks[0].key, script, std::move(wire), call, deadline, std::move(done), merge);
  return call;
}

Status RedisStore::Run(const StoreBatch& batch, std::span<Decision> out) {
  if (batch.op == StoreOp::kRefund) return Refund(batch.checks, batch.now);
  const std::span<const StoreCheck> checks = batch.checks;
  const Micros now = batch.now;
  if (out.size() < checks.size()) return Status::InvalidArgument("output span too small");
  // The wait and the I/O thread share one deadline; whichever ends the call first
  // counts its timeout (Call::timeout_counted).
  const redis::Deadline deadline = redis::DeadlineAfter(impl_->options.call_timeout);
  auto w = std::make_shared<redis::Waiter<Batch>>();
  auto call = impl_->Evaluate(batch.op, checks, now, deadline,
                              [w](const Status& s, std::span<const Decision> d) {
                                w->Complete([&](Batch& b) {
                                  b.status = s;
                                  b.n = d.size();
                                  std::copy(d.begin(), d.end(), b.decisions);
                                });
                              });
  if (!w->Wait(deadline)) {
    if (call) impl_->CountTimeout(*call);
    return Status::DeadlineExceeded("Redis did not answer within " +
                                    std::to_string(impl_->options.call_timeout / 1000) + " ms");
  }
  const Batch& b = w->value();
  if (!b.status.ok()) return b.status;
  std::copy(b.decisions, b.decisions + b.n, out.begin());
  return Status::Ok();
}

// A refund is the batch script with every cost negated (lua/dispatch.lua), even for one
// check: refunds are rare, and the one-check scripts stay lean. The reply is empty.
std::shared_ptr<Call> RedisStore::Impl::Refund(std::span<const StoreCheck> checks, Micros now,
                                               redis::Deadline deadline, RefundCallback done) {
  RedisStore::Impl* impl_ = this;
  Status s = ValidateBatch(StoreBatch{.op = StoreOp::kRefund, .checks = checks, .now = now});
  if (!s.ok() || checks.empty()) {
    done(s);
    return nullptr;
  }
  if (cluster && checks.size() > 1 && redis::CountSlots(checks) > 1) {
    // Keys in several slots: one refund script per slot (atomic per slot only).
    redis::RefundAcrossSlots(
        checks, deadline,
        [this, now](std::span<const StoreCheck> c, redis::Deadline d, RefundCallback cb) {
          Refund(c, now, d, std::move(cb));
        },
        std::move(done));
    return nullptr;
  }
  impl_->calls.fetch_add(1, std::memory_order_relaxed);
  auto call = std::make_shared<Call>();
  const redis::Script& script = redis::BatchScript();
  std::string wire =
      EncodeEval(script, checks, now, impl_->options.use_caller_time, StoreOp::kRefund, *call);
  // call->n == 0: the reply must be an empty array.
  impl_->Run(checks[0].key, script, std::move(wire), call, deadline,
             [done = std::move(done)](const Status& st, std::span<const Decision>) { done(st); });
  return call;
}

Status RedisStore::Refund(std::span<const StoreCheck> checks, Micros now) {
  const redis::Deadline deadline = redis::DeadlineAfter(impl_->options.call_timeout);
  auto w = std::make_shared<redis::Waiter<Status>>();
  auto call = impl_->Refund(checks, now, deadline,
                            [w](const Status& s) { w->Complete([&](Status& out) { out = s; }); });
  if (!w->Wait(deadline)) {
    if (call) impl_->CountTimeout(*call);
    return Status::DeadlineExceeded("Redis did not answer within " +
                                    std::to_string(impl_->options.call_timeout / 1000) + " ms");
  }
  return w->value();
}

Status RedisStore::Reset(const Policy& policy, std::string_view key) {
  const bool log = policy.algorithm == Algorithm::kSlidingWindowLog;
  // Blocks (Policy::block_for): the block key goes with the state (lua/penalties.lua).
  const bool block = policy.block_for > 0;
  redis::CommandBuilder b(2 + (log ? 1 : 0) + (block ? 1 : 0));
  b.Add("DEL").Add(key);
  if (log) b.Add(std::string(key) + ":log");
  if (block) b.Add(std::string(key) + ":b");
  std::string wire = b.Take();
  auto r = impl_->router->Call(key, redis::Command{std::move(wire), {}},
                               redis::DeadlineAfter(impl_->options.call_timeout));
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::Unavailable("Redis answered: " + r->str);
  return Status::Ok();
}

RedisStoreStats RedisStore::Stats() const {
  RedisStoreStats s;
  s.calls = impl_->calls.load(std::memory_order_relaxed);
  s.errors = impl_->errors.load(std::memory_order_relaxed);
  const redis::ConnectionStats& c = impl_->router->stats();
  s.script_reloads = c.script_reloads.load(std::memory_order_relaxed);
  s.timeouts = impl_->timeouts.load(std::memory_order_relaxed);
  s.reconnects = c.reconnects.load(std::memory_order_relaxed);
  s.coalesced_calls = c.coalesced_calls.load(std::memory_order_relaxed);
  s.coalesced_evaluations = c.coalesced_groups.load(std::memory_order_relaxed);
  s.moved = c.moved.load(std::memory_order_relaxed);
  s.ask = c.ask.load(std::memory_order_relaxed);
  s.cluster_retries = c.cluster_retries.load(std::memory_order_relaxed);
  s.topology_refreshes = c.topology_refreshes.load(std::memory_order_relaxed);
  s.cross_slot_refunds = impl_->cross_slot_refunds.load(std::memory_order_relaxed);
  return s;
}

Result<std::shared_ptr<Store>> OpenStore(std::string_view url) {
  if (url.empty() || url == "memory://")
    return std::shared_ptr<Store>(std::make_shared<MemoryStore>());
  if (url.starts_with("redis") || url.starts_with("unix://")) {
    RedisStoreOptions o;
    o.url = std::string(url);
    auto s = RedisStore::Create(std::move(o));
    if (!s.ok()) return s.status();
    return std::shared_ptr<Store>(std::move(*s));
  }
  return Status::InvalidArgument("unknown store URL '" + std::string(url) +
                                 "' (expected memory://, redis://host:port[/db], "
                                 "unix:///path/to/socket, rediss://, redis-cluster:// or "
                                 "redis-sentinel://)");
}

}  // namespace sluice
