// Reservations (issue #12 item 2) across processes on one Redis: 4 processes reserve on
// one key at 5x its rate with a max_wait, through the lease tests' helper process
// (lease_load_helper.cc, mode "reserve").
//  - The admitted times (decision time + wait) never exceed the algorithm's bound in
//    any window: at most limit + burst in any 1 s. The helpers decide on one shared
//    clock (the system clock, caller-time mode) so that each admitted time is known
//    exactly, not bracketed by a round trip; a lock shared by the fleet keeps their
//    decisions in the order of their clock readings, as Redis's own clock would
//    (lease_load_helper.cc, FleetLock).
//  - Cancelled reservations refund: with every reservation cancelled (on Redis's own
//    clock, interleaved with the other processes' reservations), the key is back to its
//    full budget afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "lease_policies.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

constexpr int kProcesses = 4;
constexpr int kThreads = 2;  // per process: one per policy
constexpr int kDurationMs = 2500;

struct FleetOutput {
  std::map<std::string, std::vector<Micros>> admitted_at;
  // policy -> {admitted, denied, waited, errors}
  std::map<std::string, std::array<long, 4>> counts;
  bool ok = true;
};

// Runs the fleet: kProcesses helpers in `mode`, each thread at 5x the rate shared out.
FleetOutput RunFleet(const std::string& url, const std::string& mode) {
  const double per_thread = 5.0 * kReserveLimit / (kProcesses * kThreads / 2);
  std::vector<FILE*> pipes;
  FleetOutput out;
  for (int i = 0; i < kProcesses; ++i) {
    const std::string cmd = std::string(SLUICE_LEASE_HELPER) + " '" + url + "' reserve " + mode +
                            " " + std::to_string(kDurationMs) + " " + std::to_string(kThreads) +
                            " " + std::to_string(per_thread);
    FILE* f = popen(cmd.c_str(), "r");
    EXPECT_NE(f, nullptr) << cmd;
    if (f == nullptr) {
      out.ok = false;
      return out;
    }
    pipes.push_back(f);
  }
  for (FILE* f : pipes) {
    char line[256];
    int summaries = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      char name[64];
      long long at = 0;
      std::array<long, 4> c{};
      if (std::sscanf(line, "a %63s %lld", name, &at) == 2) {
        out.admitted_at[name].push_back(static_cast<Micros>(at));
      } else if (std::sscanf(line, "r %63s %ld %ld %ld %ld", name, &c[0], &c[1], &c[2], &c[3]) ==
                 5) {
        for (int k = 0; k < 4; ++k) out.counts[name][k] += c[k];
        ++summaries;
      }
    }
    EXPECT_EQ(pclose(f), 0);
    EXPECT_EQ(summaries, 2) << "a helper process failed";
    out.ok = out.ok && summaries == 2;
  }
  return out;
}

TEST(ReservationFleet, AdmittedTimesNeverExceedTheLimitInAnyWindow) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  FleetOutput f = RunFleet(*url, "fleet");
  ASSERT_TRUE(f.ok);
  const Micros window = 1'000'000;
  const std::size_t bound = kReserveLimit + kReserveBurst;
  for (const Policy& p : ReservePolicies()) {
    SCOPED_TRACE(p.name);
    std::vector<Micros> t = f.admitted_at[p.name];
    const auto& c = f.counts[p.name];
    EXPECT_EQ(c[3], 0) << "errors";
    EXPECT_EQ(static_cast<long>(t.size()), c[0]);
    EXPECT_GT(c[1], c[0]) << "the load must exceed the limit for the test to mean much";
    EXPECT_GT(c[2], c[0] / 2) << "most admitted reservations should have waited";
    std::sort(t.begin(), t.end());
    std::size_t worst = 0;
    for (std::size_t i = 0, j = 0; i < t.size(); ++i) {
      while (t[i] - t[j] >= window) ++j;
      worst = std::max(worst, i - j + 1);
    }
    EXPECT_LE(worst, bound) << "admitted times exceed limit + burst in a 1 s window";
    EXPECT_GE(worst, kReserveLimit) << "the load should fill a window";
    std::printf("%-8s admitted %ld (%ld waited) denied %ld; busiest 1 s window %zu (bound %zu)\n",
                p.name.c_str(), c[0], c[2], c[1], worst, bound);
  }
}

TEST(ReservationFleet, CancelledReservationsComeBack) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  FleetOutput f = RunFleet(*url, "cancel");
  ASSERT_TRUE(f.ok);
  // A limiter on Redis's clock, without a deny cache: every policy's key is full again.
  // (the policies fail closed: a peek that timed out would read as nothing left)
  RedisStoreOptions so;
  so.url = *url;
  so.call_timeout = kPatientCallTimeout;
  so.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(so);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  LimiterOptions lo;
  lo.policies = ReservePolicies();
  lo.store = *store;
  lo.deny_cache = false;
  auto limiter = Limiter::Create(std::move(lo));
  ASSERT_TRUE(limiter.ok());
  Decision per[2];
  ASSERT_TRUE((*limiter)->Peek("r", per).ok());
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string& name = (*limiter)->policies()[i].name;
    SCOPED_TRACE(name);
    const auto& c = f.counts[name];
    EXPECT_EQ(c[3], 0) << "errors (a cancel that failed counts as one)";
    EXPECT_GT(c[0], static_cast<long>(kReserveLimit)) << "too few reservations to mean much";
    EXPECT_GT(c[2], 0) << "some reservations must have been for a future slot";
    EXPECT_EQ(per[i].remaining, kReserveBurst) << "the cancelled budget did not all come back";
    std::printf(
        "%-8s reserved and cancelled %ld (%ld for a future slot), denied %ld; "
        "remaining afterwards %llu of %llu\n",
        name.c_str(), c[0], c[2], c[1], static_cast<unsigned long long>(per[i].remaining),
        static_cast<unsigned long long>(kReserveBurst));
  }
}

}  // namespace
}  // namespace sluice::testing
