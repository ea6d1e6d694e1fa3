// RedisStore: one EVALSHA per batch (of the one-check script of its algorithm when
// the batch has one check, of the batch script otherwise), pipelined over a few
// shared connections. See docs/redis.md.
#include "sluice/redis_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/algorithms.h"
#include "redis/client_thread.h"
#include "redis/cluster_router.h"
#include "redis/cluster_slots.h"
#include "redis/cross_slot.h"
#include "redis/module_wire.h"
#include "redis/router.h"
#include "redis/script_wire.h"
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
// The lean scripts have no such fixed cost (lua/lean_*.lua): a call of two checks costs
// Redis less than two one-check calls, so their calls merge from two on.
constexpr std::size_t kMinLeanBatches = 2;

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
  // Calls the native module decides carry its command too (the URL's module=off: never).
  bool module = true;
  // The grouped scripts that merged calls run (connection.h, "Coalescing"): the
  // coalesced script, the batch script for penalties and calls with a check of a policy
  // with block_for (the same wire; the coalesced script has neither), and the lean scripts
  // for calls of plain fixed-window, sliding-log and bucket (GCRA, token bucket) checks
  // only; their max_groups is options.coalesce (1: off).
  redis::CoalesceTarget coalesce_target{}, batch_target{}, fixed_window_target{},
      sliding_log_target{}, bucket_target{};
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

  // The CoalesceTargets above, from `o` (coalesce, caller time) and `module`.
  void SetCoalesceTargets(const RedisStoreOptions& o);
  void CheckMaxmemory(redis::NodeClient& node);
  Status CheckEvalsha(redis::NodeClient& node, const std::string& user) const;
  void CountTimeout(Call& call) {
    if (!call.timeout_counted.exchange(true, std::memory_order_acq_rel)) {
      timeouts.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // RunAsync with the deadline given; returns the call (null if it failed at
  // once) so that a blocking caller can count its own timeout. `op`: every operation
  // but kRefund (Refund below).
  std::shared_ptr<Call> Evaluate(StoreOp op, std::span<const StoreCheck> checks, Micros now,
                                 redis::Deadline deadline, EvaluateCallback done);
  std::shared_ptr<Call> Refund(std::span<const StoreCheck> checks, Micros now,
                               redis::Deadline deadline, RefundCallback done);
  // Sends one EVALSHA of `script` (loaded on NOSCRIPT by the router) and hands the
  // parsed decisions (call->n of them) to `done`.
  void Run(std::string_view routing_key, const redis::Script& script, std::string wire,
           std::shared_ptr<Call> call, redis::Deadline deadline, EvaluateCallback done,
           redis::CoalesceInfo merge = {}, std::string module_wire = {});
  // The module's command for `checks` (doing `kinds`) when the module decides all of
  // them, else empty (connection.h, "The native module").
  std::string ModuleWire(std::span<const StoreCheck> checks, const redis::WireKind* kinds,
                         const std::string& wire, const redis::CoalesceInfo& merge) const;
};

void RedisStore::Impl::SetCoalesceTargets(const RedisStoreOptions& o) {
  coalesce_target = {redis::CoalescedScript().sha,
                     redis::CoalescedScript().source,
                     static_cast<std::size_t>(o.coalesce),
                     std::min(kMinCoalescedBatches, static_cast<std::size_t>(o.coalesce)),
                     [caller_time = o.use_caller_time](
                         const std::vector<const redis::CoalesceInfo*>& groups, std::string& out) {
                       return redis::EncodeCoalesced(caller_time, groups, out);
                     },
                     redis::DecisionSize};
  batch_target = coalesce_target;
  batch_target.sha = redis::BatchScript().sha;
  batch_target.source = redis::BatchScript().source;
  // Each lean script's lane: the coalesced script's bounds, its own script and layout.
  const auto lean = [&](redis::LeanLane lane) {
    redis::CoalesceTarget t = coalesce_target;
    t.sha = redis::LeanScript(lane).sha;
    t.source = redis::LeanScript(lane).source;
    t.min_groups = std::min(kMinLeanBatches, static_cast<std::size_t>(o.coalesce));
    t.encode = [caller_time = o.use_caller_time, lane](
                   const std::vector<const redis::CoalesceInfo*>& groups, std::string& out) {
      return redis::EncodeLeanCoalesced(caller_time, lane, groups, out);
    };
    return t;
  };
  fixed_window_target = lean(redis::LeanLane::kFixedWindow);
  sliding_log_target = lean(redis::LeanLane::kSlidingLog);
  bucket_target = lean(redis::LeanLane::kBucket);
  if (module) {
    coalesce_target.encode_module = [caller_time = o.use_caller_time](
                                        const std::vector<const redis::CoalesceInfo*>& groups,
                                        std::string& out) {
      return redis::EncodeModuleArgv(caller_time, groups, out);
    };
    batch_target.encode_module = coalesce_target.encode_module;
    fixed_window_target.encode_module = coalesce_target.encode_module;
    sliding_log_target.encode_module = coalesce_target.encode_module;
    bucket_target.encode_module = coalesce_target.encode_module;
  }
}

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
  no.connect.handshake.probe_module = url->module;
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
  impl->module = url->module;
  impl->SetCoalesceTargets(options);
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

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() {
  // A callback that held the last reference destroys the store on one of the store's own
  // threads, which cannot join itself. Another thread tears down instead: it joins this
  // one once the callback has returned, and until then Impl (which the rest of this
  // thread's work may still use) stays alive.
  if (redis::OnClientThread()) {
    std::thread([impl = std::move(impl_)]() mutable { impl.reset(); }).detach();
  }
}

void RedisStore::Impl::Run(std::string_view routing_key, const redis::Script& script,
                           std::string wire, std::shared_ptr<Call> call, redis::Deadline deadline,
                           EvaluateCallback done, redis::CoalesceInfo merge,
                           std::string module_wire) {
  auto on_reply = [this, call, done = std::move(done)](const Status& s, const redisReply* r) {
    if (!s.ok()) {
      errors.fetch_add(1, std::memory_order_relaxed);
      if (s.code() == ErrorCode::kDeadlineExceeded) CountTimeout(*call);
      done(s, {});
      return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string_view text(r->str, r->len);
      if (text.starts_with("NOTFOUND ")) {  // a settle's unknown record (lua/runner.lua)
        done(Status::NotFound(std::string(text.substr(9))), {});
        return;
      }
      errors.fetch_add(1, std::memory_order_relaxed);
      done(Status::Unavailable("Redis answered: " + std::string(text)), {});
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
  router->Send(
      routing_key,
      redis::Command{std::move(wire), script.source, std::move(merge), std::move(module_wire)},
      deadline, std::move(on_reply));
}

std::string RedisStore::Impl::ModuleWire(std::span<const StoreCheck> checks,
                                         const redis::WireKind* kinds, const std::string& wire,
                                         const redis::CoalesceInfo& merge) const {
  if (!module) return {};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (!redis::ModuleDecides(checks[i], kinds[i])) return {};
  }
  return redis::EncodeModuleCall(wire, merge, options.use_caller_time);
}

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
  bool usage = op == StoreOp::kSettle;
  for (const StoreCheck& c : checks) usage = usage || !c.usage_id.empty();
  if (cluster && checks.size() > 1 && usage && redis::CountSlots(checks) > 1) {
    // A usage reservation's records are written (and settled) with the decision, and a
    // cross-slot refund would leave them wrong: one slot only (the Limiter's keys for
    // one caller key share a hash tag).
    done(Status::InvalidArgument("a usage reservation's keys must be in one hash slot"), {});
    return nullptr;
  }
  if (cluster && checks.size() > 1 && op != StoreOp::kDecide && redis::CountSlots(checks) > 1) {
    // Release and extend apply per check, but a permit's keys share the caller key's
    // hash tag (the Limiter's and sluiced's keys do): one slot only.
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
  redis::WireKind kinds[kMaxBatch];
  redis::WireKinds(checks, op, kinds);
  auto call = std::make_shared<Call>();
  redis::CoalesceInfo merge;
  redis::ScriptCall sc =
      redis::EncodeCall(checks, {kinds, checks.size()}, now, options.use_caller_time, merge);
  for (const StoreCheck& c : checks) call->capacity[call->n++] = c.policy->Capacity();
  // Coalescing: the connection may merge this call with others queued with it
  // (connection.h); on a cluster only with calls of the same slot.
  bool coalesce = options.coalesce > 1, batch = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    coalesce = coalesce && redis::Mergeable(kinds[i]);
    batch = batch || redis::MergesIntoBatch(checks[i], kinds[i]);
  }
  if (coalesce) {
    merge.target = batch                                      ? &batch_target
                   : sc.lane == redis::LeanLane::kFixedWindow ? &fixed_window_target
                   : sc.lane == redis::LeanLane::kSlidingLog  ? &sliding_log_target
                   : sc.lane == redis::LeanLane::kBucket      ? &bucket_target
                                                              : &coalesce_target;
    merge.slot = cluster ? redis::KeySlot(checks[0].key) : 0;
  }
  std::string module_wire = ModuleWire(checks, kinds, sc.wire, merge);
  // Every key of a batch shares the hash tag of the first one (sluice keys carry
  // one), so the first key routes the whole script.
  impl_->Run(checks[0].key, *sc.script, std::move(sc.wire), call, deadline, std::move(done),
             std::move(merge), std::move(module_wire));
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

// A refund is the batch script with every check of kind refund (lua/runner.lua), even for
// one check: refunds are rare, and the one-check scripts stay lean. The reply is empty.
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
  redis::WireKind kinds[kMaxBatch];
  redis::WireKinds(checks, StoreOp::kRefund, kinds);
  redis::CoalesceInfo group;
  std::string wire = redis::EncodeGroup(script, checks, {kinds, checks.size()}, now,
                                        impl_->options.use_caller_time, group);
  std::string module_wire = ModuleWire(checks, kinds, wire, group);
  // call->n == 0: the reply must be an empty array.
  impl_->Run(
      checks[0].key, script, std::move(wire), call, deadline,
      [done = std::move(done)](const Status& st, std::span<const Decision>) { done(st); }, {},
      std::move(module_wire));
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
