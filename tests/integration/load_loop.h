// The load loop of the fleet helpers (load_helper.cc, lease_load_helper.cc): threads
// that decide as fast as they can until the load has done what the test needs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::testing {

// What a load's decisions were, per policy; counted from every thread.
struct LoadCounts {
  explicit LoadCounts(std::size_t policies)
      : allowed(policies), denied(policies), errors(policies) {}
  // One decision of policy `p`: an error unless `decided`.
  void Count(std::size_t p, bool decided, bool was_allowed) {
    (!decided ? errors : was_allowed ? allowed : denied)[p]++;
  }
  // One line per policy, as the fleet tests read them: "<name> <allowed> <denied> <errors>".
  void Print(const std::vector<std::string>& names) const {
    for (std::size_t p = 0; p < names.size(); ++p) {
      std::printf("%s %ld %ld %ld\n", names[p].c_str(), allowed[p].load(), denied[p].load(),
                  errors[p].load());
    }
  }
  std::vector<std::atomic<long>> allowed, denied, errors;
};

// The longest a helper goes on waiting for `done` past its duration: the test's bound
// on a machine too slow for the load to reach the limit at all.
inline constexpr std::chrono::seconds kLoadCap{60};

// Runs `threads` threads; thread t calls `step(i)` for i = t, t + 1, ... (each thread
// going round the policies as i % n, from its own start) until at least `duration` has passed and
// `done()` holds, or kLoadCap has passed. `done` is read between steps, from every
// thread: it must be thread-safe (atomic counters).
inline void RunLoad(int threads, std::chrono::milliseconds duration,
                    const std::function<void(std::size_t)>& step,
                    const std::function<bool()>& done) {
  const auto start = std::chrono::steady_clock::now();
  const auto min_end = start + duration;
  const auto cap = start + duration + kLoadCap;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (auto i = static_cast<std::size_t>(t);; ++i) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= cap || (now >= min_end && done())) break;
        step(i);
      }
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace sluice::testing
