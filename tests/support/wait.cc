#include "wait.h"

#include <thread>

namespace sluice::testing {

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds bound,
               std::chrono::milliseconds poll) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);  // the poll step, not a wait for time
  }
  return done();
}

}  // namespace sluice::testing
