#include "cli/bench.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "cli/store_wrappers.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/permit_id.h"

namespace sluice::cli {

using SteadyClock = std::chrono::steady_clock;

int LatencyHistogram::Index(std::uint64_t ns) {
  constexpr std::uint64_t kSub = 1u << kSubBits;
  if (ns < kSub) return static_cast<int>(ns);
  const int msb = 63 - std::countl_zero(ns);
  const int shift = msb - kSubBits;
  return ((shift + 1) << kSubBits) + static_cast<int>((ns >> shift) & (kSub - 1));
}

std::uint64_t LatencyHistogram::Value(int i) {
  constexpr int kSub = 1 << kSubBits;
  if (i < kSub) return static_cast<std::uint64_t>(i);
  const int shift = (i >> kSubBits) - 1;
  const std::uint64_t low = static_cast<std::uint64_t>(kSub + (i & (kSub - 1))) << shift;
  return low + ((std::uint64_t{1} << shift) >> 1);
}

void LatencyHistogram::Record(std::uint64_t ns) {
  counts_[static_cast<std::size_t>(Index(ns))].fetch_add(1, std::memory_order_relaxed);
  std::uint64_t m = max_.load(std::memory_order_relaxed);
  while (ns > m && !max_.compare_exchange_weak(m, ns, std::memory_order_relaxed)) {
  }
}

std::vector<std::uint64_t> LatencyHistogram::Snapshot() const {
  std::vector<std::uint64_t> out(kBuckets);
  for (int i = 0; i < kBuckets; ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::uint64_t LatencyHistogram::Quantile(const std::vector<std::uint64_t>& counts, double q) {
  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  if (total == 0) return 0;
  // The smallest value with at least q of the samples at or below it.
  const auto rank = static_cast<std::uint64_t>(std::max(1.0, q * static_cast<double>(total) + 0.5));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= rank) return Value(static_cast<int>(i));
  }
  return Value(static_cast<int>(counts.size()) - 1);
}

std::string BenchKey(std::uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "bench:%012llu", static_cast<unsigned long long>(i));
  return buf;
}

namespace {

// Script calls the store sent to Redis: evaluations, less those merged into coalesced
// calls, plus those calls (RedisStoreStats).
std::uint64_t ScriptCalls(const RedisStoreStats& s) {
  return s.calls - s.coalesced_evaluations + s.coalesced_calls;
}

std::uint64_t NextRandom(std::uint64_t& s) {  // splitmix64
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class BenchRun {
 public:
  explicit BenchRun(const BenchConfig& c) : config_(c) {}

  Status Prepare();
  void Start();
  // True when every caller has finished.
  bool WaitDone(Micros timeout);
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  BenchProgress Progress(double elapsed_s);
  BenchResult Finish();
  SteadyClock::time_point start_time() const { return start_; }
  bool async() const { return async_; }

 private:
  // One caller's request stream on the store: decisions on random keys, or for a
  // concurrency policy a permit's acquire on a random key (a new id each time) and, once
  // one was allowed, that permit's release, each a decision (a release is allowed when
  // the permit was still held).
  struct Requests {
    std::uint64_t rng = 0;
    std::uint64_t caller = 0, serial = 0;
    StoreCheck check;
    StoreOp op = StoreOp::kDecide;
    bool holding = false;
    char permit[kPermitIdLength + 1] = {};
  };
  struct Caller {
    BenchRun* run = nullptr;
    SteadyClock::time_point start;
    std::atomic<int> phase{0};  // 0 issuing, 1 the issuer returned, 2 completed
    Requests requests;
  };
  enum : int { kIssuing = 0, kReturned = 1, kCompleted = 2 };

  bool TakeTicket() {
    if (stop_.load(std::memory_order_relaxed)) return false;
    if (config_.requests == 0) return true;
    return issued_.fetch_add(1, std::memory_order_relaxed) < config_.requests;
  }
  void RecordLatency(SteadyClock::time_point start) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
    latency_.Record(static_cast<std::uint64_t>(std::max<long long>(0, ns)));
  }
  void Record(SteadyClock::time_point start, const Status& s, bool allowed) {
    RecordLatency(start);
    if (!s.ok()) {
      errors_[static_cast<int>(s.code()) & 7].fetch_add(1, std::memory_order_relaxed);
    } else if (allowed) {
      allowed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      denied_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  void CallerDone() {
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      end_ = SteadyClock::now();
      done_ = true;
      cv_.notify_all();
    }
  }
  // Sets the next request of `r` (its check and op).
  void NextRequest(Requests& r) {
    if (config_.policy.algorithm != Algorithm::kConcurrency) {
      r.check.key = keys_[NextRandom(r.rng) % keys_.size()];
      return;
    }
    if (r.holding) {
      r.op = StoreOp::kRelease;  // (the permit and key of the acquire)
      return;
    }
    r.op = StoreOp::kDecide;
    r.check.key = keys_[NextRandom(r.rng) % keys_.size()];
    std::snprintf(r.permit, sizeof(r.permit), "%016llx%016llx",
                  static_cast<unsigned long long>(r.caller),
                  static_cast<unsigned long long>(r.serial++));
    r.check.permit = std::string_view(r.permit, kPermitIdLength);
  }
  // After the decision of `r`'s request: a permit allowed is held until its release.
  static void Answered(Requests& r, bool allowed) {
    r.holding =
        r.op == StoreOp::kDecide && allowed && r.check.policy->algorithm == Algorithm::kConcurrency;
  }
  Requests NewRequests(std::uint64_t caller) const {
    Requests r;
    r.rng = config_.seed * 1000003 + caller;
    r.caller = caller;
    r.check =
        StoreCheck{.policy = &config_.policy, .cost = config_.cost, .max_wait = config_.max_wait};
    return r;
  }
  void Issue(Caller* c);
  void ThreadLoop(int index);

  const BenchConfig& config_;
  bool async_ = false;
  std::vector<std::string> keys_;  // store keys (store API) or caller keys (Limiter)
  std::unique_ptr<Limiter> limiter_;
  std::shared_ptr<CountingStore> counting_;
  SteadyEpochClock clock_;
  std::vector<std::unique_ptr<Caller>> callers_;
  std::vector<std::thread> threads_;
  std::uint64_t calls_before_ = 0;

  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> issued_{0};
  std::atomic<int> active_{0};
  std::atomic<std::uint64_t> allowed_{0}, denied_{0};
  std::array<std::atomic<std::uint64_t>, 8> errors_{};
  LatencyHistogram latency_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  SteadyClock::time_point start_, end_;

  std::vector<std::uint64_t> last_counts_;
  double last_elapsed_ = 0;
};

Status BenchRun::Prepare() {
  if (!config_.store) return Status::InvalidArgument("no store");
  if (config_.concurrency < 1 || config_.concurrency > 100000) {
    return Status::InvalidArgument("--concurrency must be 1-100000 (got " +
                                   std::to_string(config_.concurrency) + ")");
  }
  if (config_.keys < 1 || config_.keys > 10'000'000) {
    return Status::InvalidArgument("--keys must be 1-10000000 (got " +
                                   std::to_string(config_.keys) + ")");
  }
  if (config_.requests == 0 && config_.duration <= 0) {
    return Status::InvalidArgument("give a --duration above 0 or a --requests count");
  }
  if (Status s = ValidatePolicy(config_.policy); !s.ok()) return s;
  if (config_.max_wait < 0 || config_.max_wait > config_.policy.window) {
    return Status::InvalidArgument("--max-wait must be 0 to the policy's window (" +
                                   std::to_string(config_.policy.window) + "us; got " +
                                   std::to_string(config_.max_wait) + "us)");
  }
  if (config_.cost < 1 || config_.cost > config_.policy.Capacity()) {
    return Status::InvalidArgument("--cost must be 1-" + std::to_string(config_.policy.Capacity()) +
                                   " for this policy (got " + std::to_string(config_.cost) + ")");
  }
  const bool limiter = config_.api == BenchApi::kLimiter;
  if (limiter && config_.policy.algorithm == Algorithm::kConcurrency) {
    return Status::InvalidArgument(
        "a concurrency policy's permits are benchmarked on the store (--api store): "
        "Limiter::Acquire decides rates");
  }
  async_ = !limiter && config_.store->IsRemote();
  if (config_.target_rate > 0 && async_) {
    return Status::InvalidArgument(
        "--target-rate paces threads: use it with --api limiter or memory://");
  }
  keys_.reserve(config_.keys);
  for (std::uint64_t i = 0; i < config_.keys; ++i) {
    if (limiter) {
      keys_.push_back(BenchKey(i));
    } else {
      auto k = StoreKey(config_.prefix, BenchKey(i), config_.policy.name);
      if (!k.ok()) return k.status();
      keys_.push_back(std::move(*k));
    }
  }
  if (limiter) {
    counting_ = std::make_shared<CountingStore>(config_.store);
    LimiterOptions lo;
    lo.policies = {config_.policy};
    lo.store = counting_;
    lo.key_prefix = config_.prefix;
    lo.deny_cache = config_.deny_cache;
    auto l = Limiter::Create(std::move(lo));
    if (!l.ok()) return l.status();
    limiter_ = std::move(*l);
  }
  if (config_.redis) calls_before_ = ScriptCalls(config_.redis->Stats());
  return Status::Ok();
}

void BenchRun::Issue(Caller* c) {
  for (;;) {
    if (!TakeTicket()) {
      CallerDone();
      return;
    }
    NextRequest(c->requests);
    c->phase.store(kIssuing, std::memory_order_relaxed);
    c->start = SteadyClock::now();
    config_.store->RunAsync(
        StoreBatch{.op = c->requests.op,
                   .checks = std::span<const StoreCheck>(&c->requests.check, 1),
                   .now = clock_.Now()},
        [c](const Status& s, std::span<const Decision> d) {
          BenchRun* run = c->run;
          const bool allowed = s.ok() && !d.empty() && d[0].allowed;
          Answered(c->requests, allowed);
          run->Record(c->start, s, allowed);
          // Whoever comes second issues the next decision: the issuer (completed
          // inline) or this callback (completed on the store's thread).
          if (c->phase.exchange(kCompleted, std::memory_order_acq_rel) == kReturned) run->Issue(c);
        });
    if (c->phase.exchange(kReturned, std::memory_order_acq_rel) == kCompleted) continue;
    return;
  }
}

void BenchRun::ThreadLoop(int index) {
  Requests requests = NewRequests(static_cast<std::uint64_t>(index));
  // Pacing: this thread's share of the target rate, from a staggered start.
  const double period_s =
      config_.target_rate > 0 ? static_cast<double>(config_.concurrency) / config_.target_rate : 0;
  auto next = start_ + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(period_s * index / config_.concurrency));
  const auto period =
      std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(period_s));
  while (TakeTicket()) {
    if (period_s > 0) {
      std::this_thread::sleep_until(next);
      next += period;
    }
    NextRequest(requests);
    const std::string_view key = requests.check.key;
    const auto t0 = SteadyClock::now();
    if (limiter_) {
      Result<Decision> d = Status::Internal("not decided");
      if (config_.max_wait > 0) {
        auto r = limiter_->Reserve(key, config_.cost, config_.max_wait);
        if (r.ok()) {
          d = r->decision();
        } else {
          d = r.status();
        }
      } else {
        d = limiter_->Acquire(key, config_.cost);
      }
      // Store failures are counted by CountingStore; the Limiter answered with the
      // policy's failure mode, which is not a decision of the store's.
      const bool failed = d.ok() && (d->source == DecisionSource::kFailOpen ||
                                     d->source == DecisionSource::kFailClosed ||
                                     d->source == DecisionSource::kLocalFallback);
      if (!d.ok()) {
        Record(t0, d.status(), false);
      } else if (failed) {
        RecordLatency(t0);
      } else {
        Record(t0, Status::Ok(), d->allowed);
      }
    } else {
      Decision d;
      Status s =
          config_.store->Run(StoreBatch{.op = requests.op,
                                        .checks = std::span<const StoreCheck>(&requests.check, 1),
                                        .now = clock_.Now()},
                             std::span<Decision>(&d, 1));
      Answered(requests, s.ok() && d.allowed);
      Record(t0, s, d.allowed);
    }
  }
  CallerDone();
}

void BenchRun::Start() {
  active_.store(config_.concurrency, std::memory_order_relaxed);
  start_ = SteadyClock::now();
  last_counts_.assign(LatencyHistogram::kBuckets, 0);
  if (async_) {
    for (int i = 0; i < config_.concurrency; ++i) {
      auto c = std::make_unique<Caller>();
      c->run = this;
      c->requests = NewRequests(static_cast<std::uint64_t>(i));
      callers_.push_back(std::move(c));
    }
    for (auto& c : callers_) Issue(c.get());
  } else {
    for (int i = 0; i < config_.concurrency; ++i)
      threads_.emplace_back([this, i] { ThreadLoop(i); });
  }
}

bool BenchRun::WaitDone(Micros timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::microseconds(timeout), [&] { return done_; });
}

BenchProgress BenchRun::Progress(double elapsed_s) {
  BenchProgress p;
  p.elapsed_s = elapsed_s;
  p.allowed = allowed_.load(std::memory_order_relaxed);
  p.denied = denied_.load(std::memory_order_relaxed);
  for (auto& e : errors_) p.errors += e.load(std::memory_order_relaxed);
  p.decisions = p.allowed + p.denied + p.errors;
  std::vector<std::uint64_t> now = latency_.Snapshot();
  std::vector<std::uint64_t> delta(now.size());
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < now.size(); ++i) {
    delta[i] = now[i] - last_counts_[i];
    n += delta[i];
  }
  const double dt = elapsed_s - last_elapsed_;
  p.interval_rate = dt > 0 ? static_cast<double>(n) / dt : 0;
  p.interval_p50 = LatencyHistogram::Quantile(delta, 0.5);
  p.interval_p99 = LatencyHistogram::Quantile(delta, 0.99);
  last_counts_ = std::move(now);
  last_elapsed_ = elapsed_s;
  return p;
}

BenchResult BenchRun::Finish() {
  for (std::thread& t : threads_) t.join();
  BenchResult r;
  r.engine = async_ ? "async" : "threads";
  r.elapsed_s = std::chrono::duration<double>(end_ - start_).count();
  r.allowed = allowed_.load();
  r.denied = denied_.load();
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    r.errors[i] = errors_[i].load();
    if (counting_) r.errors[i] += counting_->errors[i].load();
    r.error_total += r.errors[i];
  }
  r.decisions = r.allowed + r.denied + r.error_total;
  const std::vector<std::uint64_t> counts = latency_.Snapshot();
  r.p50 = LatencyHistogram::Quantile(counts, 0.5);
  r.p90 = LatencyHistogram::Quantile(counts, 0.9);
  r.p99 = LatencyHistogram::Quantile(counts, 0.99);
  r.p999 = LatencyHistogram::Quantile(counts, 0.999);
  r.max = latency_.max();
  double sum = 0;
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    sum += static_cast<double>(counts[i]) *
           static_cast<double>(LatencyHistogram::Value(static_cast<int>(i)));
    n += counts[i];
  }
  r.mean = n > 0 ? sum / static_cast<double>(n) : 0;
  if (config_.redis) {
    r.store_calls = ScriptCalls(config_.redis->Stats()) - calls_before_;
    r.has_store_calls = true;
  }
  if (limiter_) r.deny_cache_hits = limiter_->Stats().deny_cache_hits;
  return r;
}

}  // namespace

Result<BenchResult> RunBench(const BenchConfig& config,
                             const std::function<void(const BenchProgress&)>& on_progress,
                             Micros progress_interval) {
  BenchRun run(config);
  if (Status s = run.Prepare(); !s.ok()) return s;
  run.Start();
  const auto start = run.start_time();
  const auto stop_at = start + std::chrono::microseconds(config.duration);
  auto next_report = start + std::chrono::microseconds(progress_interval);
  for (;;) {
    auto wake = next_report;
    if (config.requests == 0) wake = std::min(wake, stop_at);
    const auto now = SteadyClock::now();
    const Micros wait = std::max<Micros>(
        0, std::chrono::duration_cast<std::chrono::microseconds>(wake - now).count());
    if (run.WaitDone(wait)) break;
    const auto t = SteadyClock::now();
    if (config.requests == 0 && t >= stop_at) run.Stop();
    if (t >= next_report) {
      if (on_progress) on_progress(run.Progress(std::chrono::duration<double>(t - start).count()));
      next_report += std::chrono::microseconds(progress_interval);
    }
  }
  return run.Finish();
}

}  // namespace sluice::cli
