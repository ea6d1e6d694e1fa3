// Internal: `sluice simulate`, the article's comparison with measured numbers.
//
// Traffic (a list of timed requests) is replayed through each of the five algorithms,
// each behind its own sluice::Limiter over a MemoryStore and a ManualClock set to the
// request's time: simulated time, nothing sleeps, and a seed fixes every random draw.
//
// Every decision is also judged against the exact rule: the sliding window log applied
// to the requests *that algorithm* has admitted so far. A request of cost c at time t
// "should" pass when the costs that algorithm admitted in (t - window, t] plus c are at
// most the limit. An algorithm's decision that differs is "wrongly allowed" or "wrongly
// denied". The sliding window log therefore has no errors by construction, and every
// other algorithm is measured on its own history (see docs/algorithms.md).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/clock.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice::cli {

// One request of a traffic pattern. `key` indexes Traffic::keys.
struct Request {
  Micros t = 0;
  std::uint32_t key = 0;
  std::uint32_t line = 0;  // line number in a trace file (0 for generated traffic)
  std::uint64_t cost = 1;
};

// A named traffic pattern, requests sorted by time (ties keep their order).
struct Traffic {
  std::string id;     // short, used in file names: "boundary", "poisson-0.5x"
  std::string title;  // one line for humans
  std::vector<std::string> keys;
  std::vector<Request> requests;
  // The time range to draw: [begin, end).
  Micros begin = 0;
  Micros end = 0;
};

// The limit every algorithm is given: `limit` per `window`. The token bucket and GCRA
// refill limit/window and hold `burst` (0 = limit).
struct SimPolicy {
  std::uint64_t limit = 100;
  Micros window = 60'000'000;
  std::uint64_t burst = 0;
};

// The five policies, in table order: fixed window, sliding log, sliding counter,
// token bucket, GCRA.
std::vector<Policy> SimPolicies(const SimPolicy& p);

// 2026-07-30 12:00:00 UTC: the article's example hour.
inline constexpr Micros kSimStart = 1785412800LL * 1'000'000;
// One second of simulated time.
inline constexpr Micros kSec = 1'000'000;

// The article's boundary burst: `limit` requests at 12:00:59 and `limit` at 12:01:00
// (or, when the window does not divide a minute, one second before and at the first
// window boundary at or after 12:01:00), each group 1 ms apart, on one key.
Traffic BoundaryBurst(const SimPolicy& p);

// `keys` keys, each an independent Poisson process at `load` times the limit's rate
// (limit/window), over [kSimStart, kSimStart + duration).
Traffic Poisson(const SimPolicy& p, double load, std::uint32_t keys, Micros duration,
                std::uint64_t seed);

// On/off bursts: each key is silent for `off`, then sends Poisson traffic at `on_load`
// times the limit's rate for `on`, repeating; each key starts at a random phase.
Traffic OnOff(const SimPolicy& p, double on_load, Micros on, Micros off, std::uint32_t keys,
              Micros duration, std::uint64_t seed);

// Parses a trace: one request per line, `TIMESTAMP KEY [COST]`, fields separated by
// spaces or tabs. TIMESTAMP is seconds (since the Unix epoch, or any origin) with up to
// six decimals, e.g. 1785412859.250; KEY is 1-256 bytes without whitespace; COST is an
// integer >= 1 (default 1). Blank lines and lines starting with '#' are ignored. Lines
// may come in any order; requests are replayed in time order (ties keep file order).
// Errors name the file and line: "trace.txt:7: cost 'x' is not an integer >= 1".
Result<Traffic> ParseTrace(std::istream& in, std::string_view name);
// Opens `path` and parses it.
Result<Traffic> LoadTrace(const std::string& path);

// Checks that every request fits the policy (cost <= capacity of every algorithm);
// errors name the trace line.
Status CheckTraffic(const Traffic& traffic, const SimPolicy& p, std::string_view name);

// The outcome for one algorithm.
struct AlgorithmRun {
  Algorithm algorithm = Algorithm::kFixedWindow;
  std::uint64_t allowed = 0;  // requests (not units) allowed
  std::uint64_t denied = 0;
  // The most cost one key had admitted within any window of the policy's length.
  std::uint64_t max_in_window = 0;
  std::uint64_t wrongly_allowed = 0;
  std::uint64_t wrongly_denied = 0;
  // Time of every allowed request, only when RunOptions::keep_allowed_times.
  std::vector<Micros> allowed_times;
  // For drawing (when RunOptions::bin_width > 0): per time bin of Traffic [begin, end),
  // requests offered, requests allowed, and the most cost one key had admitted in its
  // trailing window at any moment of the bin.
  Micros bin_width = 0;
  std::vector<std::uint64_t> offered_per_bin;
  std::vector<std::uint64_t> allowed_per_bin;
  std::vector<std::uint64_t> window_peak_per_bin;
};

struct RunOptions {
  bool keep_allowed_times = false;
  // Width of a drawing bin; 0 draws nothing (the *_per_bin vectors stay empty).
  Micros bin_width = 0;
};

// Replays `traffic` through the five algorithms. Fails only if a limiter cannot be built
// or a request is invalid (CheckTraffic first).
Result<std::vector<AlgorithmRun>> RunTraffic(const Traffic& traffic, const SimPolicy& p,
                                             const RunOptions& options = {});

// A round bin width (1ms, 2ms, 5ms, ..., 1s, 2s, 5s, 10s, 15s, 30s, 1m, ...) that cuts
// `range` into at most `max_bins` bins.
Micros NiceBinWidth(Micros range, std::size_t max_bins = 150);

// "1m", "10s", "1.5s", "250ms", "1h30m" ...
std::string FormatDuration(Micros d);

// The table for one pattern.
std::string FormatTable(const Traffic& traffic, const SimPolicy& p,
                        const std::vector<AlgorithmRun>& runs);

// A self-contained SVG: one lane per algorithm with offered and allowed requests per
// second over time, the most one key had allowed in its trailing window, and the limit.
std::string RenderSvg(const Traffic& traffic, const SimPolicy& p,
                      const std::vector<AlgorithmRun>& runs);

// The whole command: parses `args` (args[0] is "simulate"), writes tables to `out` and
// errors to `err`. Returns 0, 1 (runtime failure such as an unwritable file) or 2
// (bad flags or a malformed trace).
int Simulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace sluice::cli
