// Hot-key leases (Policy::lease) on Redis: Redis calls per decision and the measured
// over-admission of one hot key offered traffic at (and above) its limit's rate, with
// and without leases, side by side in one run on one redis-server.
//
//   sluice_lease_bench <redis-url> [--seconds S] [--processes P] [--threads T]
//                      [--limit L] [--lease N]
//
// Each "process" is a Limiter with its own RedisStore (own connections, own lease
// table): what a separate process has, in one program. Every thread sends paced
// requests (open loop: request k at start + k x interval) so the offered rate is the
// limit's rate times the factor, whatever the latency. Prints a Markdown table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace {

using Clock = std::chrono::system_clock;

struct Row {
  long decisions = 0, allowed = 0, errors = 0;
  unsigned long long calls = 0;
  long max_window = 0;  // fixed window: the most allowed in one epoch-aligned second
  double elapsed = 0;
};

Row Run(const std::string& url, const sluice::Policy& policy, int processes, int threads,
        double seconds, double factor, const std::string& prefix) {
  std::vector<std::shared_ptr<sluice::RedisStore>> stores;
  std::vector<std::unique_ptr<sluice::Limiter>> limiters;
  for (int p = 0; p < processes; ++p) {
    sluice::RedisStoreOptions so;
    so.url = url;
    so.on_warning = [](std::string_view) {};
    auto s = sluice::RedisStore::Create(so);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      std::exit(1);
    }
    stores.push_back(*s);
    sluice::LimiterOptions lo;
    lo.policies = {policy};
    lo.store = *s;
    lo.key_prefix = prefix;
    limiters.push_back(std::move(sluice::Limiter::Create(std::move(lo))).value());
  }
  const double total_rate = static_cast<double>(policy.limit) * 1e6 /
                            static_cast<double>(policy.window) * factor;  // per second
  const auto interval =
      std::chrono::nanoseconds(static_cast<long long>(1e9 * processes * threads / total_rate));
  const long per_thread = static_cast<long>(seconds * total_rate / (processes * threads));
  std::mutex mu;
  std::map<long long, long> per_second;
  std::atomic<long> decisions{0}, allowed{0}, errors{0};
  const auto start = Clock::now() + std::chrono::milliseconds(50);
  std::vector<std::thread> pool;
  for (int p = 0; p < processes; ++p) {
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, p, t] {
        std::map<long long, long> mine;
        const auto offset = interval * (p * threads + t) / (processes * threads);
        for (long k = 0; k < per_thread; ++k) {
          std::this_thread::sleep_until(start + offset + k * interval);
          auto d = limiters[p]->Acquire("hot");
          decisions++;
          if (!d.ok() || d->source == sluice::DecisionSource::kFailOpen ||
              d->source == sluice::DecisionSource::kFailClosed) {
            errors++;
          } else if (d->allowed) {
            allowed++;
            const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                                Clock::now().time_since_epoch())
                                .count();
            mine[us / policy.window]++;
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        for (auto [w, n] : mine) per_second[w] += n;
      });
    }
  }
  for (auto& t : pool) t.join();
  Row r;
  r.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  limiters.clear();  // leases go back (their refunds are counted)
  for (auto& s : stores) r.calls += s->Stats().calls;
  r.decisions = decisions;
  r.allowed = allowed;
  r.errors = errors;
  for (auto [w, n] : per_second) r.max_window = std::max(r.max_window, n);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s <redis-url> [--seconds S] [--processes P] [--threads T] "
                 "[--limit L] [--lease N]\n",
                 argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  double seconds = 5;
  int processes = 4, threads = 2;
  std::uint64_t limit = 2000, lease = 50;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (f == "--processes") {
      processes = std::atoi(argv[i + 1]);
    } else if (f == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (f == "--limit") {
      limit = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (f == "--lease") {
      lease = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  std::printf(
      "%d processes x %d threads, one key, limit %llu/s, lease bound %llu (validity 100 ms), "
      "%.0f s per row\n\n",
      processes, threads, static_cast<unsigned long long>(limit),
      static_cast<unsigned long long>(lease), static_cast<double>(seconds));
  std::printf(
      "| algorithm | offered | lease | decisions | allowed | Redis calls | calls / decision | "
      "over-admission |\n|---|---|---|---|---|---|---|---|\n");
  int run = 0;
  for (const char* algo : {"fixed_window", "gcra"}) {
    for (double factor : {1.0, 2.0}) {
      for (std::uint64_t l : {std::uint64_t{0}, lease}) {
        sluice::Policy p = std::string(algo) == "gcra"
                               ? sluice::Policy::Gcra("hot", limit, std::chrono::seconds(1), limit)
                               : sluice::Policy::FixedWindow("hot", limit, std::chrono::seconds(1));
        p.lease = l;
        const Row r =
            Run(url, p, processes, threads, seconds, factor, "leasebench" + std::to_string(run++));
        // Over-admission: fixed window, the most allowed in one second beyond the limit
        // (seconds on this host's clock, which Redis's TIME also reads); GCRA, allowed
        // beyond a full burst plus the refill over the run.
        double over = 0;
        if (std::string(algo) == "gcra") {
          over = static_cast<double>(r.allowed) -
                 (static_cast<double>(limit) + static_cast<double>(limit) * r.elapsed);
        } else {
          over = static_cast<double>(r.max_window) - static_cast<double>(limit);
        }
        std::printf("| %s | %.0fx | %s | %ld | %ld | %llu | %.4f | %s%s |\n", algo, factor,
                    l == 0 ? "off" : std::to_string(l).c_str(), r.decisions, r.allowed, r.calls,
                    static_cast<double>(r.calls) / static_cast<double>(r.decisions),
                    over > 0 ? std::to_string(static_cast<long>(over)).c_str() : "0",
                    r.errors > 0 ? (" (" + std::to_string(r.errors) + " errors)").c_str() : "");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
