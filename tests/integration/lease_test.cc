// Hot-key leases (Policy::lease) on Redis, across processes: a fleet of 4 processes x
// 8 threads on one hot key stays within the documented over-admission bound, and a
// process killed while holding a lease loses at most that lease.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "child_process.h"
#include "lease_policies.h"
#include "many_processes.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

struct Counts {
  long allowed = 0, denied = 0, errors = 0;
};

TEST(LeaseFleet, ProcessesAndThreadsStayWithinTheBound) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  const auto start = std::chrono::system_clock::now();
  const std::vector<FILE*> pipes = StartFleet(SLUICE_LEASE_HELPER, *url, "load");
  std::map<std::string, Counts> total;
  unsigned long long calls = 0, decisions = 0, grants = 0;
  for (FILE* f : pipes) {
    if (f == nullptr) continue;
    char line[256];
    int lines = 0;
    bool summary = false;
    unsigned long long ca = 0, de = 0, gr = 0, re = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      char name[64];
      Counts c;
      if (std::sscanf(line, "calls %llu decisions %llu grants %llu returns %llu", &ca, &de, &gr,
                      &re) == 4) {
        summary = true;
      } else if (std::sscanf(line, "%63s %ld %ld %ld", name, &c.allowed, &c.denied, &c.errors) ==
                 4) {
        Counts& t = total[name];
        t.allowed += c.allowed;
        t.denied += c.denied;
        t.errors += c.errors;
        ++lines;
      }
    }
    EXPECT_TRUE(summary) << "a helper printed no summary";
    calls += ca;
    decisions += de;
    grants += gr;
    EXPECT_EQ(pclose(f), 0);
    EXPECT_EQ(lines, 4) << "a helper process failed";
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::system_clock::now() - start).count();

  // "kConcurrencyLimit per 1 s" over `elapsed` seconds, as
  // tests/integration/concurrency_test.cc, plus the lease bound: none for the window
  // algorithms (a lease never outlives the window it was taken in), one lease per process
  // for the bucket and GCRA.
  const double limit = kConcurrencyLimit;
  const double windows_touched = std::ceil(elapsed) + 1;
  const double lease_bound = kFleetProcesses * static_cast<double>(kLoadLease);
  const std::map<std::string, double> bound = {
      {"lfixed", limit * windows_touched},
      {"lcounter", limit * windows_touched},
      {"lbucket", limit + limit * elapsed + lease_bound},
      {"lgcra", limit + limit * elapsed + 1 + lease_bound},
  };
  for (const auto& [name, b] : bound) {
    const Counts& c = total[name];
    SCOPED_TRACE(name);
    EXPECT_EQ(c.errors, 0);
    // Each helper goes on past its duration until its own denials outnumber its
    // admissions on every policy (at most 60 s).
    EXPECT_GT(c.denied, c.allowed) << "the load must exceed the limit for the test to mean much";
    EXPECT_GT(c.allowed, 0);
    EXPECT_LE(c.allowed, b) << "allowed " << c.allowed << " in " << elapsed << " s";
    std::printf("%-8s allowed %6ld denied %7ld (bound %.0f, %.2f s)\n", name.c_str(), c.allowed,
                c.denied, b, elapsed);
  }
  EXPECT_GT(grants, 0u) << "no lease was taken";
  std::printf("redis calls %llu for %llu decisions (%.4f per decision), %llu leases\n", calls,
              decisions, static_cast<double>(calls) / static_cast<double>(decisions), grants);
}

// Runs a holder of `requests` units of `key`, ends it by SIGKILL (`kill`) or by closing
// its stdin, then counts what is left in the window; returns the units lost (neither
// allowed to the holder nor left), or -1 when the hourly window rolled over meanwhile.
long LostUnits(const std::string& url, const std::string& key, int requests, bool kill_it,
               long* holder_allowed) {
  Child c = Spawn({SLUICE_LEASE_HELPER, url, "hold", key, std::to_string(requests)});
  EXPECT_GT(c.pid, 0);
  if (c.pid <= 0) return -2;
  long allowed = 0;
  long long reset0 = 0;
  EXPECT_EQ(std::fscanf(c.out, "allowed %ld reset_after %lld", &allowed, &reset0), 2);
  *holder_allowed = allowed;
  if (kill_it) ::kill(c.pid, SIGKILL);
  close(c.in);
  int status = 0;
  EXPECT_EQ(waitpid(c.pid, &status, 0), c.pid);
  std::fclose(c.out);
  if (kill_it) {
    EXPECT_TRUE(WIFSIGNALED(status));
  } else {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }

  // Count what the window still has, without a lease.
  // (the policy fails closed: a call that timed out would read as a denial and end the
  // count early, so the count gets the patient deadline and checks that none failed)
  RedisStoreOptions so;
  so.url = url;
  so.call_timeout = kPatientCallTimeout;
  so.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(so);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return -2;
  LimiterOptions lo;
  Policy p = HeldPolicy();
  p.lease = 0;
  lo.policies = {p};
  lo.store = *store;
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  long left = 0;
  long long reset1 = -1;
  for (std::uint64_t i = 0; i <= kHeldLimit; ++i) {
    auto d = (*limiter)->Acquire(key);
    EXPECT_TRUE(d.ok());
    if (!d.ok() || !d->allowed) break;
    if (reset1 < 0) reset1 = d->reset_after;
    ++left;
  }
  EXPECT_EQ((*store)->Stats().errors, 0u) << "a store call of the count failed";
  if (reset1 > reset0) return -1;  // a new window began: the counts are of two windows
  return static_cast<long>(kHeldLimit) - allowed - left;
}

TEST(LeaseFleet, AKilledProcessLosesAtMostItsLease) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  // 86 requests grow the holder's leases to 1, 4, 16, 64 and then 100 units (the
  // bound): it is killed holding 99. An hourly window rolls over at most once in a
  // run: a second attempt is in one window.
  for (int attempt = 0; attempt < 2; ++attempt) {
    long allowed = 0;
    const long lost = LostUnits(*url, "victim" + std::to_string(attempt), 86, true, &allowed);
    if (lost == -1) continue;
    EXPECT_EQ(allowed, 86);
    EXPECT_GE(lost, 0);
    EXPECT_LE(lost, static_cast<long>(kHeldLease)) << "a killed process lost more than its lease";
    EXPECT_GT(lost, 0) << "the holder was killed holding a lease: its units are lost";
    std::printf("killed holding a lease (bound %llu): %ld units lost\n",
                static_cast<unsigned long long>(kHeldLease), lost);
    return;
  }
  FAIL() << "the window rolled over twice";
}

TEST(LeaseFleet, AProcessEndingCleanlyGivesItsLeaseBack) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  for (int attempt = 0; attempt < 2; ++attempt) {
    long allowed = 0;
    const long lost = LostUnits(*url, "clean" + std::to_string(attempt), 86, false, &allowed);
    if (lost == -1) continue;
    EXPECT_EQ(allowed, 86);
    EXPECT_EQ(lost, 0);
    return;
  }
  FAIL() << "the window rolled over twice";
}

}  // namespace
}  // namespace sluice::testing
