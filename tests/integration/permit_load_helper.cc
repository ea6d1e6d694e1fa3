// Helper process for permit_fleet_test.cc (concurrency limits, issue #12 item 1): one
// process of a fleet taking permits of one key on a RedisStore (Redis's own clock).
//
//   sluice_permit_load_helper <redis-url> load <duration-ms> <threads> <counter-file>
//     each thread takes a permit of "shared" (Policy "inflight": kFleetMaxInFlight,
//     lease 60 s) and, while it holds it, increments an in-flight counter shared by
//     every process (a std::atomic in <counter-file>, mmap'ed), records the highest
//     value seen, yields, decrements it and releases the permit; then prints
//     "acquired <n> denied <n> errors <n>";
//   sluice_permit_load_helper <redis-url> hold <key> <n> <lease-ms>
//     takes <n> permits of <key> (max_in_flight <n>, lease <lease-ms>), prints
//     "held <n> reset_after <us>", flushes, and waits, holding them, until it is killed
//     or stdin closes (then it releases them and ends).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "permit_fleet.h"
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

int Load(const char* url, long duration_ms, int nthreads, const char* counter_file) {
  const int fd = ::open(counter_file, O_RDWR);
  if (fd < 0) return 1;
  void* mem = ::mmap(nullptr, sizeof(sluice::testing::FleetCounter), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) return 1;
  auto* counter = static_cast<sluice::testing::FleetCounter*>(mem);
  sluice::LimiterOptions lo;
  lo.policies = {sluice::testing::FleetPolicy()};
  lo.store = Connect(url);
  auto limiter = sluice::Limiter::Create(std::move(lo));
  if (!limiter.ok()) return 1;
  std::atomic<long> acquired{0}, denied{0}, errors{0};
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&] {
      while (std::chrono::steady_clock::now() < end) {
        auto permit = (*limiter)->AcquirePermit("shared");
        if (!permit.ok() || permit->decision().source != sluice::DecisionSource::kStore) {
          errors++;
          continue;
        }
        if (!permit->held()) {
          denied++;
          continue;
        }
        acquired++;
        // The protected section: count who is inside, across every process.
        const long inside = counter->in_flight.fetch_add(1) + 1;
        long seen = counter->max_seen.load();
        while (inside > seen && !counter->max_seen.compare_exchange_weak(seen, inside)) {
        }
        std::this_thread::yield();
        counter->in_flight.fetch_sub(1);
        if (!permit->Release().ok()) errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("acquired %ld denied %ld errors %ld\n", acquired.load(), denied.load(),
              errors.load());
  return 0;
}

int Hold(const char* url, const char* key, int n, long lease_ms) {
  sluice::LimiterOptions lo;
  lo.policies = {sluice::Policy::Concurrency("held", static_cast<std::uint64_t>(n),
                                             std::chrono::milliseconds(lease_ms))};
  lo.store = Connect(url);
  auto limiter = sluice::Limiter::Create(std::move(lo));
  if (!limiter.ok()) return 1;
  std::vector<sluice::Permit> permits;
  long long reset_after = 0;
  for (int i = 0; i < n; ++i) {
    auto p = (*limiter)->AcquirePermit(key);
    if (!p.ok() || !p->held()) return 1;
    reset_after = p->decision().reset_after;
    permits.push_back(std::move(*p));
  }
  std::printf("held %d reset_after %lld\n", n, reset_after);
  std::fflush(stdout);
  // Killed with SIGKILL, nothing is released: the permits expire after their lease.
  while (std::fgetc(stdin) != EOF) {
  }
  return 0;  // the permits are released here
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[2], "load") == 0) {
    return Load(argv[1], std::atol(argv[3]), std::atoi(argv[4]), argv[5]);
  }
  if (argc == 6 && std::strcmp(argv[2], "hold") == 0) {
    return Hold(argv[1], argv[3], std::atoi(argv[4]), std::atol(argv[5]));
  }
  std::fprintf(stderr,
               "usage: %s <redis-url> load <duration-ms> <threads> <counter-file>\n"
               "       %s <redis-url> hold <key> <n> <lease-ms>\n",
               argv[0], argv[0]);
  return 2;
}
