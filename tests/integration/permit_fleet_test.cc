// Concurrency limits (issue #12 item 1) on Redis across processes: 4 processes x 8
// threads never hold more than max_in_flight permits at once (counted inside the
// protected section by a counter all processes share), and the permits of a process
// killed with SIGKILL come back within their lease, on Redis's clock.
#include "permit_fleet.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "child_process.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

std::unique_ptr<Limiter> RedisLimiter(const std::string& url, Policy p) {
  RedisStoreOptions so;
  so.url = url;
  so.call_timeout = kPatientCallTimeout;
  so.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(so);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return nullptr;
  LimiterOptions lo;
  lo.policies = {std::move(p)};
  lo.store = *store;
  auto limiter = Limiter::Create(std::move(lo));
  EXPECT_TRUE(limiter.ok()) << limiter.status().ToString();
  return limiter.ok() ? std::move(limiter).value() : nullptr;
}

TEST(PermitFleet, ProcessesAndThreadsNeverHoldMoreThanMaxInFlight) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  constexpr int kProcesses = 4;
  constexpr int kThreads = 8;
  constexpr int kDurationMs = 2500;
  char path[] = "/tmp/sluice_permit_fleet_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(FleetCounter)), 0);
  void* mem = mmap(nullptr, sizeof(FleetCounter), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(mem, MAP_FAILED);
  auto* counter = new (mem) FleetCounter();

  std::vector<FILE*> pipes;
  for (int i = 0; i < kProcesses; ++i) {
    const std::string cmd = std::string(SLUICE_PERMIT_HELPER) + " '" + *url + "' load " +
                            std::to_string(kDurationMs) + " " + std::to_string(kThreads) + " " +
                            path;
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr) << cmd;
    pipes.push_back(f);
  }
  long acquired = 0, denied = 0, errors = 0;
  for (FILE* f : pipes) {
    long a = 0, d = 0, e = 0;
    EXPECT_EQ(std::fscanf(f, "acquired %ld denied %ld errors %ld", &a, &d, &e), 3)
        << "a helper process failed";
    acquired += a;
    denied += d;
    errors += e;
    EXPECT_EQ(pclose(f), 0);
  }
  const long max_seen = counter->max_seen.load();
  const long in_flight = counter->in_flight.load();
  munmap(mem, sizeof(FleetCounter));
  unlink(path);

  std::printf("permits acquired %ld denied %ld errors %ld; most in flight at once %ld (max %llu)\n",
              acquired, denied, errors, max_seen,
              static_cast<unsigned long long>(kFleetMaxInFlight));
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(in_flight, 0);
  EXPECT_GT(acquired, 100) << "too few permits to mean much";
  EXPECT_GT(denied, 0) << "32 threads on 5 slots must be denied sometimes";
  EXPECT_LE(max_seen, static_cast<long>(kFleetMaxInFlight));
  EXPECT_GE(max_seen, 2) << "the fleet never overlapped: the test would prove nothing";
  // Every permit was released: all slots are free.
  auto limiter = RedisLimiter(*url, FleetPolicy());
  ASSERT_NE(limiter, nullptr);
  EXPECT_EQ(limiter->Peek("shared")->remaining, kFleetMaxInFlight);
}

// A holder of 3 permits (lease 2 s) is killed with SIGKILL: nothing releases them, so
// the slots stay taken, Redis says they are free within the lease (reset_after on its
// clock), and then they are free again. A holder that ends cleanly releases at once.
TEST(PermitFleet, AKilledHoldersPermitsComeBackWithinTheLease) {
  auto url = FlushedRedisUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  constexpr int kHeld = 3;
  constexpr long kLeaseMs = 2000;
  const Policy held = Policy::Concurrency("held", kHeld, std::chrono::milliseconds(kLeaseMs));
  auto limiter = RedisLimiter(*url, held);
  ASSERT_NE(limiter, nullptr);
  for (const bool kill_it : {true, false}) {
    SCOPED_TRACE(kill_it ? "SIGKILL" : "clean exit");
    const std::string key = kill_it ? "victim" : "clean";
    Child c = Spawn(
        {SLUICE_PERMIT_HELPER, *url, "hold", key, std::to_string(kHeld), std::to_string(kLeaseMs)});
    ASSERT_GT(c.pid, 0);
    int n = 0;
    long long reset0 = 0;
    ASSERT_EQ(std::fscanf(c.out, "held %d reset_after %lld", &n, &reset0), 2);
    const auto reported_at = std::chrono::steady_clock::now();
    ASSERT_EQ(n, kHeld);
    if (kill_it) ::kill(c.pid, SIGKILL);
    close(c.in);
    int status = 0;
    ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
    std::fclose(c.out);
    auto peek = limiter->Peek(key);
    ASSERT_TRUE(peek.ok());
    if (!kill_it) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      EXPECT_EQ(peek->remaining, static_cast<std::uint64_t>(kHeld));
      continue;
    }
    EXPECT_TRUE(WIFSIGNALED(status));
    // Still held (nothing released them), and due back within the lease. That holds
    // only while the lease lasts: if this process was descheduled for half of it since
    // the holder reported (a loaded machine), the permits may rightly be gone already,
    // and only the end state below is checked.
    if (std::chrono::steady_clock::now() - reported_at < std::chrono::milliseconds(kLeaseMs / 2)) {
      EXPECT_FALSE(peek->allowed);
      EXPECT_EQ(peek->remaining, 0u);
      EXPECT_GT(peek->retry_after, 0);
      EXPECT_LE(peek->reset_after, kLeaseMs * 1000);
    }
    EXPECT_LE(peek->reset_after, kLeaseMs * 1000);
    // Wait for the event (every slot free), with a generous bound on a busy machine.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::uint64_t free_slots = 0;
    while (std::chrono::steady_clock::now() < give_up) {
      auto d = limiter->Peek(key);
      ASSERT_TRUE(d.ok());
      free_slots = d->remaining;
      if (free_slots == static_cast<std::uint64_t>(kHeld)) break;
      // Poll no sooner than Redis says the first one is due.
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::max<Micros>(d->retry_after, 1000)));
    }
    EXPECT_EQ(free_slots, static_cast<std::uint64_t>(kHeld));
    std::vector<Permit> again;
    for (int i = 0; i < kHeld; ++i) {
      auto p = limiter->AcquirePermit(key);
      ASSERT_TRUE(p.ok());
      EXPECT_TRUE(p->held()) << i;
      again.push_back(std::move(*p));
    }
  }
}

}  // namespace
}  // namespace sluice::testing
