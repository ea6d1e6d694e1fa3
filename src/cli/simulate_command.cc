// `sluice simulate`: flags, the chosen patterns, tables and pictures.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/simulate.h"

namespace sluice::cli {
namespace {

constexpr double kMaxRequests = 50e6;

constexpr const char* kLegend =
    "columns: allowed/denied count requests. 'max in W window' is the most one key had\n"
    "allowed within any span of the policy's window, against the limit. 'wrongly allowed' /\n"
    "'wrongly denied' count decisions that differ from the exact rule (the sliding window\n"
    "log: allow when what this algorithm already allowed in the trailing window, plus this\n"
    "request, fits the limit), judged on that algorithm's own history; 'wrong' is both as a\n"
    "share of all requests. See docs/algorithms.md.\n";

constexpr const char* kSimulateFooter =
    "Patterns:\n"
    "  boundary  (default) the article's burst: LIMIT requests 1s before a window boundary\n"
    "            (12:00:59) and LIMIT right at it (12:01:00), one key\n"
    "  poisson   steady Poisson traffic per key at each --load times the limit's rate\n"
    "  onoff     each key alternates --on of Poisson traffic at --on-load times the limit's\n"
    "            rate with --off of silence, from a random phase\n"
    "  trace     replays --trace FILE\n"
    "  all       boundary, poisson and onoff (and the trace, if --trace is given)\n"
    "\n"
    "Trace file: one request per line, 'TIMESTAMP KEY [COST]' separated by spaces or tabs.\n"
    "TIMESTAMP is seconds (Unix epoch or any origin) with up to 6 decimals, e.g.\n"
    "1785412859.250; KEY is up to 256 bytes without spaces; COST is an integer >= 1\n"
    "(default 1). Blank lines and lines starting with '#' are skipped. Requests are replayed\n"
    "in timestamp order.\n"
    "\n"
    "Durations: 250ms, 10s, 1m, 2h, 1d. Exit status: 0 ok, 1 failure, 2 bad flags or input.\n";

// "--svg out.svg" with several patterns writes out-poisson-0.5x.svg and so on.
std::string SvgPath(const std::string& path, const std::string& id, bool several) {
  if (!several) return path;
  const std::size_t dot = path.rfind('.');
  const std::size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return path + "-" + id;
  }
  return path.substr(0, dot) + "-" + id + path.substr(dot);
}

// The flags of `sluice simulate`, and what they resolve to.
struct SimFlags {
  std::string pattern = "boundary";
  std::uint64_t limit = 100;
  std::string window_text = "1m";
  std::string duration_text = "10m";
  std::uint32_t keys = 1000;
  std::vector<double> loads = {0.5, 1, 2};
  double on_load = 8;
  std::string on_text;
  std::string off_text;
  std::uint64_t burst = 0;
  std::uint64_t seed = 1;
  std::string trace_path;
  std::string svg_path;
  bool pattern_given = false;  // --pattern on the command line
  // Resolved by ResolveSimFlags.
  SimPolicy policy;
  Micros duration = 0, on = 0, off = 0;
};

// Declares every flag of `sluice simulate` on `app`, into `f`; returns --pattern's.
CLI::Option* AddSimFlags(CLI::App& app, SimFlags& f) {
  auto* pattern_opt =
      app.add_option("-p,--pattern", f.pattern, "boundary, poisson, onoff, trace or all")
          ->check(CLI::IsMember({"boundary", "poisson", "onoff", "trace", "all"}))
          ->capture_default_str();
  app.add_option("-l,--limit", f.limit, "requests allowed per window")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000}))
      ->capture_default_str();
  app.add_option("-w,--window", f.window_text, "the limit's window")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-d,--duration", f.duration_text, "length of generated traffic (poisson, onoff)")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-k,--keys", f.keys, "number of keys (clients) for poisson and onoff")
      ->check(CLI::Range(std::uint32_t{1}, std::uint32_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--load", f.loads, "poisson: rates as multiples of the limit, e.g. 0.5,1,2")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  app.add_option("--on-load", f.on_load, "onoff: rate during a burst, as a multiple of the limit")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  app.add_option("--on", f.on_text, "onoff: burst length (default: a quarter of the window)")
      ->type_name("DURATION");
  app.add_option("--off", f.off_text, "onoff: silence between bursts (default: 3/4 of the window)")
      ->type_name("DURATION");
  app.add_option("--burst", f.burst, "token bucket / GCRA capacity (default: the limit)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000'000}));
  app.add_option("--seed", f.seed, "random seed; the same seed gives the same output")
      ->capture_default_str();
  app.add_option("--trace", f.trace_path, "replay a trace file (see below)")->type_name("FILE");
  app.add_option("--svg", f.svg_path, "draw each pattern (FILE-<pattern>.svg when several)")
      ->type_name("FILE");
  return pattern_opt;
}

// Checks the flags and fills f.policy, f.duration, f.on and f.off; a usage error's
// message, or "".
std::string ResolveSimFlags(SimFlags& f) {
  f.policy.limit = f.limit;
  f.policy.burst = f.burst;
  auto window = ParseDuration(f.window_text);
  if (!window.ok()) return "--window: " + window.status().message();
  if (*window < 1000 || *window > 366LL * 86400 * 1'000'000) {
    return "--window must be between 1ms and 366d (got " + f.window_text + ")";
  }
  f.policy.window = *window;
  auto duration = ParseDuration(f.duration_text);
  if (!duration.ok()) return "--duration: " + duration.status().message();
  f.duration = *duration;
  if (f.duration <= 0) return "--duration must be more than 0";
  for (const Policy& p : SimPolicies(f.policy)) {
    if (Status s = ValidatePolicy(p); !s.ok()) return s.message();
  }
  f.on = f.policy.window / 4;
  f.off = f.policy.window - f.on;
  if (!f.on_text.empty()) {
    auto r = ParseDuration(f.on_text);
    if (!r.ok()) return "--on: " + r.status().message();
    if (*r <= 0) return "--on must be more than 0";
    f.on = *r;
  }
  if (!f.off_text.empty()) {
    auto r = ParseDuration(f.off_text);
    if (!r.ok()) return "--off: " + r.status().message();
    f.off = *r;
  }
  if ((f.pattern == "onoff" || f.pattern == "all") &&
      static_cast<double>(f.duration) / static_cast<double>(f.on + f.off) * f.keys > 1e8) {
    return "--on + --off (" + FormatDuration(f.on + f.off) +
           ") is too short for --duration and --keys: over 10^8 bursts";
  }
  if (!f.trace_path.empty() && !f.pattern_given) f.pattern = "trace";
  if (f.pattern == "trace" && f.trace_path.empty()) {
    return "--pattern trace needs --trace FILE";
  }
  const bool all = f.pattern == "all";

  // Refuse runs that would take minutes, before generating anything.
  const double per_key_rate = static_cast<double>(f.limit) * static_cast<double>(f.duration) /
                              static_cast<double>(f.policy.window);
  double expected = 0;
  if (all || f.pattern == "poisson") {
    for (double l : f.loads) expected += l * per_key_rate * f.keys;
  }
  if (all || f.pattern == "onoff") {
    expected += f.on_load * per_key_rate * f.keys * static_cast<double>(f.on) /
                static_cast<double>(f.on + f.off);
  }
  if (expected > kMaxRequests) {
    std::ostringstream m;
    m << "this would simulate about " << std::llround(expected) << " requests (at most "
      << std::llround(kMaxRequests) << "); lower --keys, --duration or --load";
    return m.str();
  }
  return "";
}

int UsageError(std::ostream& err, const std::string& message) {
  err << "sluice simulate: " << message << "\n";
  return 2;
}

// Generates (or reads) each chosen pattern, runs it and prints its table (and picture).
int RunPatterns(const SimFlags& f, std::ostream& out, std::ostream& err) {
  const bool all = f.pattern == "all";
  // Generated lazily, one pattern in memory at a time; a trace is read first so that a
  // malformed file fails before any table is printed.
  std::vector<std::function<Traffic()>> patterns;
  if (all || f.pattern == "boundary") patterns.push_back([&] { return BoundaryBurst(f.policy); });
  if (all || f.pattern == "poisson") {
    for (double l : f.loads) {
      patterns.push_back([&, l] { return Poisson(f.policy, l, f.keys, f.duration, f.seed); });
    }
  }
  if (all || f.pattern == "onoff") {
    patterns.push_back(
        [&] { return OnOff(f.policy, f.on_load, f.on, f.off, f.keys, f.duration, f.seed); });
  }
  if (!f.trace_path.empty() && (all || f.pattern == "trace")) {
    auto t = LoadTrace(f.trace_path);
    if (!t.ok()) return UsageError(err, t.status().message());
    if (Status s = CheckTraffic(*t, f.policy, f.trace_path); !s.ok())
      return UsageError(err, s.message());
    // Draw until the last request has left the window.
    t->end = std::max(t->end, t->requests.back().t + f.policy.window);
    auto shared = std::make_shared<Traffic>(std::move(*t));
    patterns.push_back([shared] { return std::move(*shared); });
  }

  for (const auto& make : patterns) {
    const Traffic traffic = make();
    RunOptions options;
    if (!f.svg_path.empty()) options.bin_width = NiceBinWidth(traffic.end - traffic.begin);
    auto runs = RunTraffic(traffic, f.policy, options);
    if (!runs.ok()) {
      err << "sluice simulate: " << runs.status().message() << "\n";
      return runs.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
    }
    out << FormatTable(traffic, f.policy, *runs) << "\n";
    if (!f.svg_path.empty()) {
      const std::string path = SvgPath(f.svg_path, traffic.id, patterns.size() > 1);
      std::ofstream file(path, std::ios::binary | std::ios::trunc);
      file << RenderSvg(traffic, f.policy, *runs);
      file.close();
      if (!file) {
        err << "sluice simulate: cannot write '" << path << "'\n";
        return 1;
      }
      out << "wrote " << path << "\n\n";
    }
  }
  return 0;
}

}  // namespace

int Simulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Runs traffic through the five algorithms (fixed window, sliding window log, sliding\n"
      "window counter, token bucket, GCRA) with a simulated clock and prints, per pattern,\n"
      "what each allowed and how often it disagreed with the exact sliding window log.",
      "sluice simulate"};
  app.footer(kSimulateFooter);
  app.get_formatter()->column_width(28);

  SimFlags f;
  CLI::Option* pattern_opt = AddSimFlags(app, f);
  if (const int code = ParseFlags(app, args, "sluice simulate", out, err); code >= 0) return code;
  f.pattern_given = pattern_opt->count() > 0;
  if (const std::string bad = ResolveSimFlags(f); !bad.empty()) return UsageError(err, bad);
  if (const int code = RunPatterns(f, out, err); code != 0) return code;
  out << kLegend;
  return 0;
}

int RunSimulate(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return Simulate(args, std::cout, std::cerr);
}

}  // namespace sluice::cli
