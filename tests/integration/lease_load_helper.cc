// Helper process for lease_test.cc: one process of a fleet sharing hot keys with
// leases (Policy::lease) on a RedisStore (Redis's own clock).
//
//   sluice_lease_load_helper <redis-url> load <duration-ms> <threads>
//     hammers key "hot" under each of LeasePolicies() from many threads, then prints
//     one line per policy: "<name> <allowed> <denied> <errors>", and a last line
//     "calls <redis calls> decisions <n> grants <n> returns <n>" (the limiter ends,
//     so its leases are given back, before the calls are counted);
//   sluice_lease_load_helper <redis-url> hold <key> <requests>
//     takes <requests> units of <key> under "held" (fixed window, 1 h, lease 100),
//     prints "allowed <n> reset_after <us of the first decision>", flushes, and then
//     waits, holding its lease, until it is killed, or stdin closes (then it ends
//     cleanly, giving the lease back).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "lease_policies.h"
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
  std::vector<std::atomic<long>> allowed(n), denied(n), errors(n);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  std::vector<std::thread> threads;
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); std::chrono::steady_clock::now() < end;
           ++i) {
        const std::size_t p = i % n;
        sluice::Check c{p, "hot", 1};
        auto d = limiter->Acquire(std::span<const sluice::Check>(&c, 1));
        const bool decided = d.ok() && (d->source == sluice::DecisionSource::kStore ||
                                        d->source == sluice::DecisionSource::kLease ||
                                        d->source == sluice::DecisionSource::kDenyCache);
        if (!decided) {
          errors[p]++;
        } else if (d->allowed) {
          allowed[p]++;
        } else {
          denied[p]++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const sluice::LimiterStats st = limiter->Stats();
  limiter.reset();  // gives the leases back
  for (std::size_t p = 0; p < n; ++p) {
    std::printf("%s %ld %ld %ld\n", names[p].c_str(), allowed[p].load(), denied[p].load(),
                errors[p].load());
  }
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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[2], "load") == 0) {
    return Load(argv[1], std::atol(argv[3]), std::atoi(argv[4]));
  }
  if (argc == 5 && std::strcmp(argv[2], "hold") == 0) {
    return Hold(argv[1], argv[3], std::atoi(argv[4]));
  }
  std::fprintf(stderr,
               "usage: %s <redis-url> load <duration-ms> <threads>\n"
               "       %s <redis-url> hold <key> <requests>\n",
               argv[0], argv[0]);
  return 2;
}
