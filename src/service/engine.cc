// sluiced's orchestration: plan a request (service/plan.h), decide its checks in one
// batch through the process's Decider, and turn the decisions into per-descriptor
// statuses, counters and headers (service/response_headers.h).
#include "service/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "limiter/permit_internal.h"
#include "service/admin_top_keys.h"
#include "service/log.h"
#include "service/response_headers.h"
#include "service/timed_store.h"
#include "sluice/permit.h"

namespace sluice::service {
namespace {

// The answer for a banned rule (requests_per_unit 0), written to `out`: denied, nothing
// left, the full window until reset; in shadow or quota mode allowed and reported as a
// would-be denial.
const Decision& BannedDecision(const Rule& r, Decision& out) {
  out = Decision{};
  out.allowed = r.policy.shadow;
  out.shadow_denied = r.policy.shadow;
  out.reset_after = r.policy.window;
  out.retry_after = r.policy.shadow ? 0 : r.policy.window;
  return out;
}

}  // namespace

struct Engine::Snapshot {
  std::uint64_t generation = 0;
  std::unique_ptr<RuleSet> rules;
  const Settings& settings() const { return rules->config().settings; }
};

// A request between planning and deciding: its plan, and the snapshot whose rules the
// plan points into.
struct Engine::Prepared {
  std::shared_ptr<Snapshot> snap;
  Plan plan;
};

Engine::~Engine() {
  std::unique_lock<std::mutex> lock(refunds_mu_);
  refunds_cv_.wait(lock, [this] { return refunds_in_flight_ == 0; });
}

Result<std::shared_ptr<Engine::Snapshot>> Engine::Compile(const Config& config) {
  auto rules = RuleSet::Compile(config, *metrics_);
  if (!rules.ok()) return rules.status();
  auto s = std::make_shared<Snapshot>();
  s->rules = std::move(*rules);
  return s;
}

Result<std::unique_ptr<Engine>> Engine::Create(const Config& config, Options options) {
  if (!options.store) return Status::InvalidArgument("engine needs a store");
  std::unique_ptr<Engine> e(new Engine());
  e->metrics_ = std::make_shared<Metrics>();
  e->embedded_ = std::dynamic_pointer_cast<MemoryStore>(options.store);
  Engine* self = e.get();
  e->store_ = std::make_shared<TimedStore>(std::move(options.store), e->metrics_,
                                           [self] { self->OnKeyCap(); });
  e->store_remote_ = e->store_->IsRemote();
  e->clock_ = options.clock ? std::move(options.clock) : std::make_shared<SteadyEpochClock>();
  decide::Options d;
  d.store = e->store_;
  d.clock = e->clock_;
  d.deny_cache = true;
  d.deny_cache_bytes = options.deny_cache_bytes;
  d.fallback_max_keys = options.fallback_max_keys;
  e->decider_ = std::make_unique<decide::Decider>(std::move(d));
  e->max_keys_ = config.settings.max_keys;
  e->top_keys_ = options.top_keys;
  auto snap = e->Compile(config);
  if (!snap.ok()) return snap.status();
  (*snap)->generation = e->generation_.fetch_add(1) + 1;
  std::atomic_store(&e->snapshot_, std::move(*snap));
  return e;
}

void Engine::OnKeyCap() {
  if (embedded_ == nullptr) return;
  const std::uint64_t n = key_cap_refusals_.fetch_add(1, std::memory_order_relaxed) + 1;
  // One line when the cap is first hit, then at most one per 10 s while it lasts, with
  // the refusals since the last line.
  const std::int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = key_cap_logged_at_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < 10'000'000) return;
  if (!key_cap_logged_at_.compare_exchange_strong(last, now)) return;
  const std::uint64_t before = key_cap_logged_refusals_.exchange(n);
  const MemoryStoreStats st = embedded_->Stats();
  Log(LogLevel::kWarn, "key_cap_reached",
      {{"store", "embedded"},
       {"keys", std::to_string(st.keys)},
       {"max_keys", std::to_string(max_keys_)},
       {"refused", std::to_string(n - before)},
       {"decisions", "new keys by each rule's failure_mode, not over_limit"}});
}

Status Engine::Reload(const Config& config) {
  auto snap = Compile(config);
  if (!snap.ok()) {
    metrics_->CountReload(false);
    return snap.status();
  }
  (*snap)->generation = generation_.fetch_add(1) + 1;
  std::atomic_store(&snapshot_, std::move(*snap));
  metrics_->CountReload(true);
  return Status::Ok();
}

Settings Engine::settings() const {
  return std::atomic_load(&snapshot_)->settings();
}

std::shared_ptr<const Settings> Engine::settings_ptr() const {
  std::shared_ptr<Snapshot> snap = std::atomic_load(&snapshot_);
  return std::shared_ptr<const Settings>(snap, &snap->settings());
}

EngineStats Engine::Stats() const {
  auto snap = std::atomic_load(&snapshot_);
  EngineStats st;
  st.limiter = decider_->Stats();
  st.deny_cache_bytes = decider_->DenyCacheBytes();
  st.generation = snap->generation;
  st.domains = snap->rules->domain_count();
  st.rules = snap->rules->rule_count();
  return st;
}

std::string Engine::RenderMetrics() const {
  std::string out;
  out.reserve(8192);
  const EngineStats st = Stats();
  EngineSeries e;
  e.limiter = st.limiter;
  e.deny_cache_bytes = st.deny_cache_bytes;
  e.embedded = embedded_ != nullptr;
  // The embedded store drops idle keys only as new ones arrive: sweep first, so that
  // the gauge counts what the store holds, not keys whose windows have passed.
  if (embedded_ != nullptr) embedded_->SweepExpired(clock_->Now());
  e.embedded_keys = embedded_ != nullptr ? embedded_->Stats().keys : 0;
  e.embedded_max_keys = max_keys_;
  e.fallback_keys = decider_->FallbackKeys();
  e.fallback_max_keys = decider_->FallbackMaxKeys();
  e.key_cap_refusals = key_cap_refusals_.load(std::memory_order_relaxed);
  e.generation = st.generation;
  e.rules = st.rules;
  metrics_->Render(out, e);
  return out;
}

std::shared_ptr<const RuleSet> Engine::rules(std::uint64_t* generation) const {
  std::shared_ptr<Snapshot> snap = std::atomic_load(&snapshot_);
  if (generation != nullptr) *generation = snap->generation;
  return std::shared_ptr<const RuleSet>(snap, snap->rules.get());
}

Status Engine::PeekStore(std::span<const StoreCheck> checks, std::span<Decision> out) {
  return store_->Run(StoreBatch{.checks = checks, .now = clock_->Now()}, out);
}

Status Engine::ResetKey(const Rule& rule, std::string_view key) {
  return decider_->Reset(rule.policy, &rule.fallback, key);
}

std::string Engine::DumpConfig() const {
  return std::atomic_load(&snapshot_)->rules->Dump();
}

Status Engine::Prepare(const RateLimitRequest& req, Prepared& p, RateLimitResponse* resp,
                       bool* decide, const PlanOp& op) {
  *decide = false;
  p.snap = std::atomic_load(&snapshot_);
  resp->overall_code = Code::kOk;
  resp->statuses.clear();
  resp->response_headers.clear();
  if (Status s = BuildPlan(*p.snap->rules, *metrics_, req, op, p.plan); !s.ok()) return s;
  resp->statuses.resize(p.plan.n);
  if (p.plan.nchecks == 0) {
    Finish(p, {}, resp);  // unlimited limits are counted; nothing else to do
    return Status::Ok();
  }
  *decide = true;
  return Status::Ok();
}

void Engine::Finish(const Prepared& prepared, std::span<const Decision> decisions,
                    RateLimitResponse* resp) const {
  const Settings& settings = prepared.snap->settings();
  const Plan& p = prepared.plan;
  // Per limited slot, its decision and status; the binding one (of a descriptor, of the
  // request) is chosen among them by the decision layer's rule.
  Decision per[kMaxChecks];
  DescriptorStatus slot_status[kMaxChecks];
  std::size_t slot_of[kMaxChecks];
  Decision banned;
  std::size_t m = 0;
  for (std::size_t i = 0; i < p.n; ++i) {
    const std::size_t m0 = m;
    for (std::size_t a = p.first[i]; a < p.first[i] + p.count[i]; ++a) {
      const Rule* r = p.rule[a];
      if (r == nullptr) continue;
      DescriptorCounters* c = p.counters[a];
      if (r->unlimited) {
        resp->statuses[i].limit_remaining = std::numeric_limits<std::uint32_t>::max();
        if (c != nullptr) c->unlimited.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const Decision& d = r->banned ? BannedDecision(*r, banned) : decisions[p.check[a]];
      DescriptorStatus& st = slot_status[m];
      st = DescriptorStatus{};
      st.has_limit = true;
      st.requests_per_unit = r->requests_per_unit;
      st.unit = r->unit;
      st.name = r->name;
      // OVER_LIMIT reports 0 remaining, as envoyproxy/ratelimit does (a denial for a
      // cost above what remains leaves some units, but none for this request).
      st.limit_remaining = d.allowed ? static_cast<std::uint32_t>(std::min<std::uint64_t>(
                                           d.remaining, std::numeric_limits<std::uint32_t>::max()))
                                     : 0;
      st.capacity = r->policy.Capacity();
      st.window = r->policy.window;
      st.concurrency = r->policy.algorithm == Algorithm::kConcurrency;
      st.duration_until_reset = d.reset_after;
      st.retry_after = d.retry_after;
      st.source = d.source;
      st.code = d.allowed ? Code::kOk : Code::kOverLimit;
      st.above_capacity = !r->banned && !d.allowed && p.checks[p.check[a]].cost > st.capacity;
      // The embedded store fails only at its key cap: the failure mode decided, and that
      // is neither the limit's "ok" nor its "over_limit".
      const bool key_cap = embedded_ != nullptr && (d.source == DecisionSource::kFailOpen ||
                                                    d.source == DecisionSource::kFailClosed ||
                                                    d.source == DecisionSource::kLocalFallback);
      if (!d.allowed) resp->overall_code = Code::kOverLimit;
      if (key_cap) {
        if (c != nullptr) c->key_cap.fetch_add(1, std::memory_order_relaxed);
      } else if (!d.allowed) {
        if (c != nullptr) c->over_limit.fetch_add(1, std::memory_order_relaxed);
        if (top_keys_ && !r->banned && r->counters != nullptr) {
          TopKeysOf(*r->counters).Record(DescriptorPartOf(p.keys[p.check[a]]), clock_->Now());
        }
      } else if (d.shadow_denied && r->quota_mode) {
        if (c != nullptr) c->quota_over_limit.fetch_add(1, std::memory_order_relaxed);
      } else if (d.shadow_denied) {
        if (c != nullptr) c->shadow_over_limit.fetch_add(1, std::memory_order_relaxed);
      } else if (c != nullptr) {
        c->ok.fetch_add(1, std::memory_order_relaxed);
        const double used = static_cast<double>(d.limit - std::min(d.limit, d.remaining));
        if (d.limit > 0 &&
            used > std::floor(settings.near_limit_ratio * static_cast<double>(d.limit))) {
          c->near_limit.fetch_add(1, std::memory_order_relaxed);
        }
      }
      per[m] = d;
      per[m].remaining = st.limit_remaining;
      slot_of[m++] = a;
    }
    if (m == m0) continue;
    // The descriptor's status is its binding limit's; with several limits
    // (`rate_limits`), each one is listed too.
    const std::size_t bind = m0 + decide::BindingIndex(std::span<const Decision>(per + m0, m - m0));
    DescriptorStatus& out = resp->statuses[i];
    out = slot_status[bind];
    if (p.rule[slot_of[bind]]->multi) {
      out.limits.assign(slot_status + m0, slot_status + m);
    }
  }
  // A descriptor's `metadata` goes back while the descriptor is under its limit.
  for (std::size_t a = 0; a < p.nslots; ++a) {
    const Rule* r = p.rule[a];
    if (r == nullptr || r->metadata.empty()) continue;
    DescriptorStatus& st = resp->statuses[p.desc[a]];
    if (st.code == Code::kOk) st.metadata = r->metadata;
  }
  if (settings.response_headers != Settings::Headers::kNone && m > 0) {
    std::vector<HeaderItem> items;
    items.reserve(m);
    for (std::size_t k = 0; k < m; ++k) {
      const Rule* r = p.rule[slot_of[k]];
      items.push_back(HeaderItem{HeaderPolicyName(*r, p.desc[slot_of[k]]), !r->name.empty(),
                                 &r->policy, per[k], slot_status[k].above_capacity});
    }
    AppendHeaders(settings.response_headers, items,
                  decide::BindingIndex(std::span<const Decision>(per, m)), resp->response_headers);
  }
}

Status Engine::ShouldRateLimit(const RateLimitRequest& req, RateLimitResponse* resp) {
  thread_local Prepared p;
  struct Release {
    Prepared& p;
    ~Release() { p.snap.reset(); }  // a thread must not keep an old config alive
  } release{p};
  bool decide = false;
  if (Status s = Prepare(req, p, resp, &decide, PlanOp{}); !s.ok() || !decide) return s;
  Decision out[kMaxChecks];
  auto bind = decider_->Decide(std::span<const decide::Check>(p.plan.checks, p.plan.nchecks),
                               std::span<Decision>(out, p.plan.nchecks));
  if (!bind.ok()) return bind.status();
  Finish(p, std::span<const Decision>(out, p.plan.nchecks), resp);
  return Status::Ok();
}

void Engine::ShouldRateLimitAsync(const RateLimitRequest& req, AsyncDone done) {
  if (!store_remote_) {
    // An in-process store answers inline anyway: decide on this thread's scratch
    // (Prepared, response), without the heap objects an asynchronous answer needs. A
    // `done` that decides again on this thread gets a response of its own.
    thread_local RateLimitResponse scratch;
    thread_local bool busy = false;
    if (!busy) {
      busy = true;
      struct Free {
        ~Free() { busy = false; }
      } free_scratch;
      Status s = ShouldRateLimit(req, &scratch);
      done(s, scratch);
      return;
    }
    RateLimitResponse resp;
    Status s = ShouldRateLimit(req, &resp);
    done(s, resp);
    return;
  }
  auto p = std::make_shared<Prepared>();
  auto resp = std::make_shared<RateLimitResponse>();
  bool decide = false;
  Status s = Prepare(req, *p, resp.get(), &decide, PlanOp{});
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  decider_->DecideAsync(std::span<const decide::Check>(p->plan.checks, p->plan.nchecks),
                        [this, p, resp, done = std::move(done)](
                            const Status& st, std::span<const Decision> d, std::size_t) {
                          if (st.ok()) Finish(*p, d, resp.get());
                          done(st, *resp);
                        });
}

void Engine::RefundAsync(std::string_view domain, const DescriptorRequest& d, std::uint64_t units,
                         std::function<void(std::uint64_t refunded)> done) {
  auto snap = std::atomic_load(&snapshot_);
  auto plan = std::make_shared<Plan>();
  RateLimitRequest req;
  req.domain = domain;
  req.descriptors.push_back(d);
  req.descriptors[0].has_hits_addend = true;
  req.descriptors[0].hits_addend = units;
  if (units == 0 || !BuildPlan(*snap->rules, *metrics_, req, PlanOp{}, *plan).ok()) return done(0);
  StoreCheck checks[kMaxChecks];
  std::size_t n = 0;
  for (std::size_t i = 0; i < plan->nchecks; ++i) {
    const decide::Check& c = plan->checks[i];
    if (c.policy->shadow || c.policy->algorithm == Algorithm::kConcurrency) continue;
    units = std::min(units, c.policy->Capacity());
    checks[n++] = StoreCheck{.policy = c.policy, .key = c.key};
  }
  if (n == 0 || units == 0) return done(0);
  for (std::size_t i = 0; i < n; ++i) checks[i].cost = units;
  const StoreBatch batch{.op = StoreOp::kRefund,
                         .checks = std::span<const StoreCheck>(checks, n),
                         .now = clock_->Now()};
  {
    std::lock_guard<std::mutex> lock(refunds_mu_);
    ++refunds_in_flight_;
  }
  // The plan (and the snapshot its policies and keys live in) is kept until the answer.
  store_->RunAsync(batch, [this, snap, plan, units, done = std::move(done)](
                              const Status& s, std::span<const Decision>) {
    if (s.ok()) {
      for (std::size_t i = 0; i < plan->nchecks; ++i) decider_->ForgetDenial(plan->checks[i].key);
    }
    done(s.ok() ? units : 0);
    std::lock_guard<std::mutex> lock(refunds_mu_);
    if (--refunds_in_flight_ == 0) refunds_cv_.notify_all();
  });
}

// --- concurrency limits (issue #12): /v1/acquire, /v1/release, /v1/extend ---------

void Engine::AcquireAsync(const RateLimitRequest& req, PermitDone done) {
  auto p = std::make_shared<Prepared>();
  auto resp = std::make_shared<PermitResponse>();
  bool decide = false;
  const std::string id = permit_internal::NewPermitId();
  Status s = Prepare(req, *p, &resp->rate, &decide, PlanOp{true, StoreOp::kDecide, id});
  if (s.ok() && p->plan.nconcurrency == 0) {
    s = Status::InvalidArgument(
        "no concurrency limit matches the request's descriptors (/v1/acquire takes permits "
        "of limits with `concurrency:`; use /v1/check for rate limits)");
  }
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  // The token names the descriptors, so that a release matches the same limits.
  std::string token = EncodePermitToken(id, req);
  decider_->DecideAsync(std::span<const decide::Check>(p->plan.checks, p->plan.nchecks),
                        [this, p, resp, token = std::move(token), done = std::move(done)](
                            const Status& st, std::span<const Decision> d, std::size_t) {
                          if (st.ok()) {
                            Finish(*p, d, &resp->rate);
                            if (resp->rate.overall_code != Code::kOverLimit) {
                              resp->permit = token;
                              resp->lease = p->plan.lease;
                            }
                          }
                          done(st, *resp);
                        });
}

void Engine::PermitAsync(StoreOp op, std::string_view token, PermitDone done) {
  auto resp = std::make_shared<PermitResponse>();
  std::string id, storage;
  RateLimitRequest req;
  if (Status s = DecodePermitToken(token, &id, &storage, &req); !s.ok()) {
    done(s, *resp);
    return;
  }
  auto p = std::make_shared<Prepared>();
  bool decide = false;
  Status s = Prepare(req, *p, &resp->rate, &decide, PlanOp{true, op, id});
  if (s.ok() && p->plan.nconcurrency == 0) {
    s = Status::NotFound("permit " + id +
                         ": no concurrency limit matches its descriptors any more (the "
                         "configuration changed since it was acquired?)");
  }
  if (!s.ok() || !decide) {
    done(s, *resp);
    return;
  }
  decider_->DecideAsync(
      std::span<const decide::Check>(p->plan.checks, p->plan.nchecks),
      [p, resp, op, id = std::move(id), done = std::move(done)](
          const Status& st, std::span<const Decision> d, std::size_t) {
        if (!st.ok()) return done(st, *resp);
        // Decision::allowed of a release or an extend: the permit was held.
        bool held = false;
        for (const Decision& x : d) held = held || x.allowed;
        if (!held) {
          Status nf = Status::NotFound("permit " + id +
                                       " is not held: unknown, released already, or expired after "
                                       "its lease");
          return done(nf, *resp);
        }
        if (op == StoreOp::kExtend) resp->lease = p->plan.lease;
        done(Status::Ok(), *resp);
      },
      op);
}

}  // namespace sluice::service
