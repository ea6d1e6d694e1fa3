// Concurrency limits (issue #12 item 1) on Redis: acquire+release pairs per second
// against plain rate decisions, side by side in one run on one redis-server, through
// the public API (Limiter::AcquirePermit + Permit::Release vs Limiter::Acquire).
//
//   sluice_permit_bench <redis-url> [--seconds S] [--threads T] [--rounds R]
//   sluice_permit_bench memory [--held N,N,...] [--seconds S]
//
// `memory`: the embedded store's per-call cost of each permit operation against the
// number of permits held on the key (issue #20 item 4), through the public Store API
// (MemoryStore::Run), one thread, the time fixed so nothing expires. For each count N:
// N permits are taken on one key of a concurrency policy of max_in_flight 10^6, then
// each operation is timed for S seconds (200 calls at least; the median call is
// reported): acquire of a new id (then released, untimed, so N stays), release of that
// id, release of an id not held, extend of a held id, and an acquire that trims one
// expired permit. Compiled
// unchanged against an older tree, it measures the code before (bench/permit_memory.sh).
//
// Closed loop: T threads, each on a key of its own, as fast as answers come back, on
// one RedisStore (its pipelined connections). The rows alternate (rate, permits, rate,
// permits, ...) so both see the same machine; each row runs S seconds. The rate
// policy never denies (a token bucket far above the offered rate), nor does the
// concurrency policy (max_in_flight 1000 per key, one permit held at a time per
// thread). A pair is two store calls (acquire, release): its cost relative to one
// rate decision is rate decisions/s divided by pairs/s. Prints a Markdown table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  long ops = 0, errors = 0;
  double seconds = 0;
  unsigned long long calls = 0;
};

Row Run(sluice::Limiter& limiter, sluice::RedisStore& store, bool permits, int threads,
        double seconds, int round) {
  std::atomic<long> ops{0}, errors{0};
  const unsigned long long calls0 = store.Stats().calls;
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::string key = "r" + std::to_string(round) + "t" + std::to_string(t);
      long mine = 0, bad = 0;
      while (Clock::now() < end) {
        if (permits) {
          auto p = limiter.AcquirePermit(key);
          if (!p.ok() || !p->held() || p->decision().source != sluice::DecisionSource::kStore) {
            ++bad;
            continue;
          }
          if (!p->Release().ok()) ++bad;
        } else {
          sluice::Check c{1, key, 1};
          auto d = limiter.Acquire(std::span<const sluice::Check>(&c, 1));
          if (!d.ok() || !d->allowed || d->source != sluice::DecisionSource::kStore) {
            ++bad;
            continue;
          }
        }
        ++mine;
      }
      ops += mine;
      errors += bad;
    });
  }
  for (auto& t : pool) t.join();
  Row r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.ops = ops;
  r.errors = errors;
  r.calls = store.Stats().calls - calls0;
  return r;
}

// --- the embedded store (`memory`) ---

std::string PermitText(std::uint64_t n) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", 0x5eedULL, static_cast<unsigned long long>(n));
  return buf;
}

// One permit operation on `key`; false if the store failed.
bool PermitOp(sluice::Store& store, const sluice::Policy& p, sluice::StoreOp op,
              const std::string& id, sluice::Micros now, bool* allowed) {
  const std::string key = "sluice:{k}:c";
  sluice::StoreCheck c{.policy = &p, .key = key, .cost = 1, .permit = id};
  sluice::Decision d;
  const sluice::StoreBatch b{
      .op = op, .checks = std::span<const sluice::StoreCheck>(&c, 1), .now = now};
  const bool ok = store.Run(b, std::span<sluice::Decision>(&d, 1)).ok();
  *allowed = d.allowed;
  return ok;
}

// The median nanoseconds of one call of `op(i)` for i = 0, 1, ... over `seconds` of
// calls (200 calls at least), with `untimed(i)` run after each call outside the
// timing. A median, so that the calls a loaded machine preempts do not count.
template <class Op, class Untimed>
double NsPerCall(double seconds, Op op, Untimed untimed) {
  std::vector<double> ns;
  double spent = 0;
  while (spent < seconds || ns.size() < 200) {
    const auto t0 = Clock::now();
    op(static_cast<long>(ns.size()));
    const double d = std::chrono::duration<double>(Clock::now() - t0).count();
    spent += d;
    untimed(static_cast<long>(ns.size()));
    ns.push_back(d * 1e9);
  }
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(ns.size() / 2), ns.end());
  return ns[ns.size() / 2];
}

int MemoryMain(const std::vector<std::uint64_t>& counts, double seconds) {
  using sluice::StoreOp;
  const sluice::Policy p = sluice::Policy::Concurrency("c", 1'000'000, std::chrono::hours(24 * 30));
  const sluice::Policy brief =
      sluice::Policy::Concurrency("c", 1'000'000, std::chrono::milliseconds(1));
  std::printf("one thread, one key, max_in_flight 10^6; median ns per call\n\n");
  std::printf(
      "| held | acquire | release | release (not held) | extend | acquire trimming one "
      "expired |\n|---|---|---|---|---|---|\n");
  for (const std::uint64_t held : counts) {
    sluice::MemoryStore store;
    const sluice::Micros now = 1'000'000'000'000;
    bool allowed = false, failed = false;
    for (std::uint64_t i = 0; i < held; ++i) {
      failed |= !PermitOp(store, p, StoreOp::kDecide, PermitText(i), now, &allowed) || !allowed;
    }
    std::uint64_t next = held;
    std::string id;
    const double acquire = NsPerCall(
        seconds,
        [&](long) {
          id = PermitText(next++);
          failed |= !PermitOp(store, p, StoreOp::kDecide, id, now, &allowed) || !allowed;
        },
        [&](long) { PermitOp(store, p, StoreOp::kRelease, id, now, &allowed); });
    const double release = NsPerCall(
        seconds, [&](long) { failed |= !PermitOp(store, p, StoreOp::kRelease, id, now, &allowed); },
        [&](long) {
          id = PermitText(next++);
          PermitOp(store, p, StoreOp::kDecide, id, now, &allowed);
        });
    PermitOp(store, p, StoreOp::kRelease, id, now, &allowed);
    const std::string unknown = PermitText(~0ULL);
    const double release_unknown = NsPerCall(
        seconds,
        [&](long) {
          failed |= !PermitOp(store, p, StoreOp::kRelease, unknown, now, &allowed) || allowed;
        },
        [](long) {});
    double extend = 0;
    if (held > 0) {
      extend = NsPerCall(
          seconds,
          [&](long i) {
            failed |= !PermitOp(store, p, StoreOp::kExtend,
                                PermitText(static_cast<std::uint64_t>(i) % held), now, &allowed) ||
                      !allowed;
          },
          [](long) {});
    }
    // Each timed acquire meets one permit of a 1 ms lease that expired (set at t, the
    // acquire at t + 1 ms), among the `held` of a 30-day lease.
    sluice::Micros t = now;
    const double trim = NsPerCall(
        seconds,
        [&](long) {
          id = PermitText(next++);
          failed |= !PermitOp(store, p, StoreOp::kDecide, id, t, &allowed) || !allowed;
        },
        [&](long) {
          PermitOp(store, p, StoreOp::kRelease, id, t, &allowed);
          PermitOp(store, brief, StoreOp::kDecide, PermitText(next++), t, &allowed);
          t += 1000;
        });
    std::printf("| %llu | %.0f | %.0f | %.0f | %s | %.0f |%s\n",
                static_cast<unsigned long long>(held), acquire, release, release_unknown,
                held > 0 ? std::to_string(static_cast<long>(extend)).c_str() : "-", trim,
                failed ? " (unexpected answers)" : "");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "memory") {
    std::vector<std::uint64_t> counts = {0, 1000, 10000, 100000};
    double seconds = 0.5;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string f = argv[i];
      if (f == "--held") {
        counts.clear();
        for (const char* q = argv[i + 1]; *q != 0;) {
          char* end = nullptr;
          counts.push_back(std::strtoull(q, &end, 10));
          q = *end == ',' ? end + 1 : end;
          if (end == q && *q != 0) break;
        }
      } else if (f == "--seconds") {
        seconds = std::atof(argv[i + 1]);
      } else {
        std::fprintf(stderr, "unknown flag %s\n", f.c_str());
        return 2;
      }
    }
    return MemoryMain(counts, seconds);
  }
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s <redis-url> [--seconds S] [--threads T] [--rounds R]\n"
                 "       %s memory [--held N,N,...] [--seconds S]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  double seconds = 3;
  int threads = 8, rounds = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (f == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (f == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  sluice::RedisStoreOptions so;
  so.url = url;
  so.on_warning = [](std::string_view) {};
  auto store = sluice::RedisStore::Create(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  sluice::LimiterOptions lo;
  // Policy 0: the permits (AcquirePermit takes it alone: see below); policy 1: the rate.
  lo.policies = {
      sluice::Policy::Concurrency("inflight", 1000, std::chrono::seconds(30)),
      sluice::Policy::TokenBucket("rate", 1'000'000'000, 1'000'000'000, std::chrono::seconds(1))};
  lo.store = *store;
  auto both = sluice::Limiter::Create(lo);
  lo.policies.resize(1);
  auto only_permits = sluice::Limiter::Create(lo);
  if (!both.ok() || !only_permits.ok()) return 1;
  std::printf("%d threads, one RedisStore, a key per thread, %.0f s per row\n\n", threads, seconds);
  std::printf(
      "| round | rate decisions/s | acquire+release pairs/s | pair cost (x one decision) |"
      " Redis calls/s (rate, pairs) |\n|---|---|---|---|---|\n");
  double sum_rate = 0, sum_pairs = 0;
  for (int round = 0; round < rounds; ++round) {
    const Row rate = Run(**both, **store, false, threads, seconds, round);
    const Row pairs = Run(**only_permits, **store, true, threads, seconds, round);
    const double rps = static_cast<double>(rate.ops) / rate.seconds;
    const double pps = static_cast<double>(pairs.ops) / pairs.seconds;
    sum_rate += rps;
    sum_pairs += pps;
    std::printf("| %d | %.0f | %.0f | %.2f | %.0f, %.0f |%s\n", round + 1, rps, pps, rps / pps,
                static_cast<double>(rate.calls) / rate.seconds,
                static_cast<double>(pairs.calls) / pairs.seconds,
                rate.errors + pairs.errors > 0
                    ? (" " + std::to_string(rate.errors + pairs.errors) + " errors").c_str()
                    : "");
    std::fflush(stdout);
  }
  std::printf("| mean | %.0f | %.0f | %.2f | |\n", sum_rate / rounds, sum_pairs / rounds,
              sum_rate / sum_pairs);
  return 0;
}
