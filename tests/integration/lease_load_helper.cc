// Helper process for lease_test.cc: one process of a fleet sharing hot keys with
// leases (Policy::lease) on a RedisStore (Redis's own clock).
//
//   sluice_lease_load_helper <redis-url> load <duration-ms> <threads>
//     hammers key "hot" under each of LeasePolicies() from many threads for at least
//     <duration-ms>, and on until its denials outnumber its admissions on every policy
//     (at most kLoadCap more), then prints
//     one line per policy: "<name> <allowed> <denied> <errors>", and a last line
//     "calls <redis calls> decisions <n> grants <n> returns <n>" (the limiter ends,
//     so its leases are given back, before the calls are counted);
//   sluice_lease_load_helper <redis-url> hold <key> <requests>
//     takes <requests> units of <key> under "held" (fixed window, 1 h, lease 100),
//     prints "allowed <n> reset_after <us of the first decision>", flushes, and then
//     waits, holding its lease, until it is killed, or stdin closes (then it ends
//     cleanly, giving the lease back);
//   sluice_lease_load_helper <redis-url> reserve <fleet|cancel> <duration-ms> <threads>
//         <per-thread-rate>
//     reservations (issue #12 item 2, reservation_fleet_test.cc): each thread reserves
//     on key "r" under one of ReservePolicies() (thread i: policy i % 2) at
//     <per-thread-rate> per second (paced), with max_wait kReserveMaxWait.
//     fleet: decides on the caller's clock (the system clock, shared by the fleet's
//       processes) so that each admitted time is known exactly: prints
//       "a <policy> <decision time + wait>" per admitted reservation;
//     cancel: decides on Redis's clock and cancels every reservation: each thread holds
//       its last 8 and cancels the oldest (so cancellations interleave with later
//       reservations, of its own and of the other processes), and the rest at the end;
//     both end with "r <policy> <admitted> <denied> <waited> <errors>" per policy.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lease_policies.h"
#include "load_loop.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace {

std::shared_ptr<sluice::RedisStore> Connect(const char* url) {
  sluice::RedisStoreOptions so;
  so.url = url;
  so.call_timeout = 2'000'000;
  so.on_warning = [](std::string_view) {};
  auto store = sluice::RedisStore::Create(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  return *store;
}

int Load(const char* url, long duration_ms, int nthreads) {
  auto store = Connect(url);
  sluice::LimiterOptions lo;
  lo.policies = sluice::testing::LeasePolicies();
  lo.store = store;
  auto created = sluice::Limiter::Create(std::move(lo));
  if (!created.ok()) return 1;
  std::unique_ptr<sluice::Limiter> limiter = std::move(created).value();
  const std::size_t n = limiter->policies().size();
  std::vector<std::string> names;
  for (const auto& p : limiter->policies()) names.push_back(p.name);
  sluice::testing::LoadCounts counts(n);
  const auto step = [&](std::size_t i) {
    const std::size_t p = i % n;
    sluice::Check c{p, "hot", 1};
    auto d = limiter->Acquire(std::span<const sluice::Check>(&c, 1));
    const bool decided = d.ok() && (d->source == sluice::DecisionSource::kStore ||
                                    d->source == sluice::DecisionSource::kLease ||
                                    d->source == sluice::DecisionSource::kDenyCache);
    counts.Count(p, decided, d.ok() && d->allowed);
  };
  const auto denials_outnumber_admissions = [&] {
    for (std::size_t p = 0; p < n; ++p) {
      if (counts.denied[p].load() <= counts.allowed[p].load()) return false;
    }
    return true;
  };
  sluice::testing::RunLoad(nthreads, std::chrono::milliseconds(duration_ms), step,
                           denials_outnumber_admissions);
  const sluice::LimiterStats st = limiter->Stats();
  limiter.reset();  // gives the leases back
  counts.Print(names);
  std::printf("calls %llu decisions %llu grants %llu returns %llu\n",
              static_cast<unsigned long long>(store->Stats().calls),
              static_cast<unsigned long long>(st.decisions),
              static_cast<unsigned long long>(st.lease_grants),
              static_cast<unsigned long long>(st.lease_returns));
  return 0;
}

int Hold(const char* url, const char* key, int requests) {
  auto store = Connect(url);
  sluice::LimiterOptions lo;
  lo.policies = {sluice::testing::HeldPolicy()};
  lo.store = store;
  auto limiter = sluice::Limiter::Create(std::move(lo));
  if (!limiter.ok()) return 1;
  long allowed = 0;
  long long first_reset_after = -1;
  for (int i = 0; i < requests; ++i) {
    auto d = (*limiter)->Acquire(key);
    if (!d.ok()) return 1;
    if (first_reset_after < 0) first_reset_after = d->reset_after;
    allowed += d->allowed ? 1 : 0;
  }
  std::printf("allowed %ld reset_after %lld\n", allowed, first_reset_after);
  std::fflush(stdout);
  // Hold the lease until killed. The test kills this process with SIGKILL: the
  // limiter's destructor, which would give the lease back, never runs.
  // Closing stdin ends it cleanly: the limiter is destroyed and gives the lease back.
  while (std::fgetc(stdin) != EOF) {
  }
  return 0;
}

// ---- Reservations (issue #12 item 2) ----

// The system clock, read the same way by every process of the fleet; remembers, per
// thread, the last time it gave (the `now` of that thread's last decision).
class FleetClock final : public sluice::Clock {
 public:
  sluice::Micros Now() const override {
    last_ = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
    return last_;
  }
  static sluice::Micros Last() { return last_; }

 private:
  static thread_local sluice::Micros last_;
};
thread_local sluice::Micros FleetClock::last_ = 0;

// fleet: one lock for every thread of every process of the fleet (a mutex, and flock on
// a file named after the Redis URL, whose port is the test's own), held from reading
// the clock until the decision's reply. Decisions then reach Redis in the order of
// their `now`, as they do on Redis's own clock. Without it a thread descheduled between
// reading the clock and sending would arrive with a `now` older than the state's: the
// store decides at the later time (time never goes back), so `now + wait` would
// understate that request's admitted time, and the window count would measure the
// scheduler rather than the algorithm.
class FleetLock {
 public:
  explicit FleetLock(const std::string& url)
      : fd_(::open(
            ("/tmp/sluice-reserve-fleet-" + std::to_string(std::hash<std::string>{}(url)) + ".lock")
                .c_str(),
            O_CREAT | O_RDWR | O_CLOEXEC, 0600)) {}
  ~FleetLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void lock() {
    mu_.lock();
    ::flock(fd_, LOCK_EX);
  }
  void unlock() {
    ::flock(fd_, LOCK_UN);
    mu_.unlock();
  }

 private:
  int fd_;
  std::mutex mu_;
};

int Reserve(const char* url, bool fleet, long duration_ms, int nthreads, double rate) {
  FleetLock fleet_lock(url);
  if (fleet && !fleet_lock.ok()) {
    std::perror("fleet lock");
    return 1;
  }
  sluice::RedisStoreOptions so;
  so.url = url;
  so.call_timeout = 2'000'000;
  so.use_caller_time = fleet;
  so.on_warning = [](std::string_view) {};
  auto store = sluice::RedisStore::Create(so);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  sluice::LimiterOptions lo;
  lo.policies = sluice::testing::ReservePolicies();
  lo.store = *store;
  lo.clock = std::make_shared<FleetClock>();
  auto created = sluice::Limiter::Create(std::move(lo));
  if (!created.ok()) return 1;
  sluice::Limiter& limiter = **created;
  const std::size_t n = limiter.policies().size();
  std::vector<std::atomic<long>> admitted(n), denied(n), waited(n), errors(n);
  std::mutex out_mu;
  std::vector<std::pair<std::size_t, sluice::Micros>> times;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::milliseconds(duration_ms);
  const auto interval = std::chrono::microseconds(static_cast<long>(1e6 / rate));
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t p = static_cast<std::size_t>(t) % n;
      const sluice::Check c{p, "r", 1};
      std::deque<sluice::Reservation> held;  // cancel: the last 8, oldest first
      auto next = start + interval * t / nthreads;
      while (std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_until(next);  // pacing the load, not a test's timing
        next += interval;
        if (fleet) fleet_lock.lock();
        auto r = limiter.Reserve(std::span<const sluice::Check>(&c, 1),
                                 sluice::testing::kReserveMaxWait);
        const sluice::Micros decided_at = FleetClock::Last();
        if (fleet) fleet_lock.unlock();
        const bool decided = r.ok() && (r->decision().source == sluice::DecisionSource::kStore ||
                                        r->decision().source == sluice::DecisionSource::kDenyCache);
        if (!decided) {
          errors[p]++;
          continue;
        }
        if (!r->allowed()) {
          denied[p]++;
          continue;
        }
        admitted[p]++;
        waited[p] += r->wait() > 0 ? 1 : 0;
        if (fleet) {
          std::lock_guard<std::mutex> lock(out_mu);
          times.emplace_back(p, decided_at + r->wait());
        } else {
          held.push_back(std::move(r).value());
          if (held.size() > 8) {
            if (!held.front().Cancel().ok()) errors[p]++;
            held.pop_front();
          }
        }
      }
      for (sluice::Reservation& h : held) {
        if (!h.Cancel().ok()) errors[p]++;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& [p, at] : times) {
    std::printf("a %s %lld\n", limiter.policies()[p].name.c_str(), static_cast<long long>(at));
  }
  for (std::size_t p = 0; p < n; ++p) {
    std::printf("r %s %ld %ld %ld %ld\n", limiter.policies()[p].name.c_str(), admitted[p].load(),
                denied[p].load(), waited[p].load(), errors[p].load());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[2], "load") == 0) {
    return Load(argv[1], std::atol(argv[3]), std::atoi(argv[4]));
  }
  if (argc == 5 && std::strcmp(argv[2], "hold") == 0) {
    return Hold(argv[1], argv[3], std::atoi(argv[4]));
  }
  if (argc == 7 && std::strcmp(argv[2], "reserve") == 0) {
    return Reserve(argv[1], std::strcmp(argv[3], "fleet") == 0, std::atol(argv[4]),
                   std::atoi(argv[5]), std::atof(argv[6]));
  }
  std::fprintf(stderr,
               "usage: %s <redis-url> load <duration-ms> <threads>\n"
               "       %s <redis-url> hold <key> <requests>\n"
               "       %s <redis-url> reserve <fleet|cancel> <duration-ms> <threads> <rate>\n",
               argv[0], argv[0], argv[0]);
  return 2;
}
