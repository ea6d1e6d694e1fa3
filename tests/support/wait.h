// The one bounded wait of the test support: poll a condition another thread or process
// makes true, up to a generous bound. It waits for an event, never for time to pass: a
// passing run returns as soon as the condition holds.
#pragma once

#include <chrono>
#include <functional>

namespace sluice::testing {

// How often the support library's own start-up waits (Sentinel groups, Clusters) ask the
// servers again.
inline constexpr std::chrono::milliseconds kServerPoll{50};

// Polls `done` every `poll` until it returns true (then true) or `bound` has passed
// (then false, after one last look). The bound is for a loaded 2-core CI machine.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds bound = std::chrono::seconds(30),
               std::chrono::milliseconds poll = std::chrono::milliseconds(5));

}  // namespace sluice::testing
