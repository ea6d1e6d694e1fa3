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

constexpr const char* kFooter =
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

}  // namespace

int Simulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Runs traffic through the five algorithms (fixed window, sliding window log, sliding\n"
      "window counter, token bucket, GCRA) with a simulated clock and prints, per pattern,\n"
      "what each allowed and how often it disagreed with the exact sliding window log.",
      "sluice simulate"};
  app.footer(kFooter);
  app.get_formatter()->column_width(28);

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

  auto* pattern_opt =
      app.add_option("-p,--pattern", pattern, "boundary, poisson, onoff, trace or all")
          ->check(CLI::IsMember({"boundary", "poisson", "onoff", "trace", "all"}))
          ->capture_default_str();
  app.add_option("-l,--limit", limit, "requests allowed per window")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000}))
      ->capture_default_str();
  app.add_option("-w,--window", window_text, "the limit's window")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-d,--duration", duration_text, "length of generated traffic (poisson, onoff)")
      ->capture_default_str()
      ->type_name("DURATION");
  app.add_option("-k,--keys", keys, "number of keys (clients) for poisson and onoff")
      ->check(CLI::Range(std::uint32_t{1}, std::uint32_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--load", loads, "poisson: rates as multiples of the limit, e.g. 0.5,1,2")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  app.add_option("--on-load", on_load, "onoff: rate during a burst, as a multiple of the limit")
      ->check(CLI::Range(0.001, 1000.0))
      ->capture_default_str();
  app.add_option("--on", on_text, "onoff: burst length (default: a quarter of the window)")
      ->type_name("DURATION");
  app.add_option("--off", off_text, "onoff: silence between bursts (default: 3/4 of the window)")
      ->type_name("DURATION");
  app.add_option("--burst", burst, "token bucket / GCRA capacity (default: the limit)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000'000}));
  app.add_option("--seed", seed, "random seed; the same seed gives the same output")
      ->capture_default_str();
  app.add_option("--trace", trace_path, "replay a trace file (see below)")->type_name("FILE");
  app.add_option("--svg", svg_path, "draw each pattern (FILE-<pattern>.svg when several)")
      ->type_name("FILE");

  std::vector<std::string> storage(args.begin(), args.end());
  if (storage.empty()) storage.emplace_back("simulate");
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "sluice simulate: " << e.what() << "\nRun 'sluice simulate --help' for usage.\n";
    return 2;
  }

  const auto usage_error = [&](const std::string& message) {
    err << "sluice simulate: " << message << "\n";
    return 2;
  };
  SimPolicy policy;
  policy.limit = limit;
  policy.burst = burst;
  auto window = ParseDuration(window_text);
  if (!window.ok()) return usage_error("--window: " + window.status().message());
  if (*window < 1000 || *window > 366LL * 86400 * 1'000'000) {
    return usage_error("--window must be between 1ms and 366d (got " + window_text + ")");
  }
  policy.window = *window;
  auto duration = ParseDuration(duration_text);
  if (!duration.ok()) return usage_error("--duration: " + duration.status().message());
  if (*duration <= 0) return usage_error("--duration must be more than 0");
  for (const Policy& p : SimPolicies(policy)) {
    if (Status s = ValidatePolicy(p); !s.ok()) return usage_error(s.message());
  }
  Micros on = policy.window / 4;
  Micros off = policy.window - on;
  if (!on_text.empty()) {
    auto r = ParseDuration(on_text);
    if (!r.ok()) return usage_error("--on: " + r.status().message());
    if (*r <= 0) return usage_error("--on must be more than 0");
    on = *r;
  }
  if (!off_text.empty()) {
    auto r = ParseDuration(off_text);
    if (!r.ok()) return usage_error("--off: " + r.status().message());
    off = *r;
  }
  if ((pattern == "onoff" || pattern == "all") &&
      static_cast<double>(*duration) / static_cast<double>(on + off) * keys > 1e8) {
    return usage_error("--on + --off (" + FormatDuration(on + off) +
                       ") is too short for --duration and --keys: over 10^8 bursts");
  }
  if (!trace_path.empty() && pattern_opt->count() == 0) pattern = "trace";
  if (pattern == "trace" && trace_path.empty()) {
    return usage_error("--pattern trace needs --trace FILE");
  }
  const bool all = pattern == "all";

  // Refuse runs that would take minutes, before generating anything.
  const double per_key_rate =
      static_cast<double>(limit) * static_cast<double>(*duration) / static_cast<double>(*window);
  double expected = 0;
  if (all || pattern == "poisson") {
    for (double l : loads) expected += l * per_key_rate * keys;
  }
  if (all || pattern == "onoff") {
    expected +=
        on_load * per_key_rate * keys * static_cast<double>(on) / static_cast<double>(on + off);
  }
  if (expected > kMaxRequests) {
    std::ostringstream m;
    m << "this would simulate about " << std::llround(expected) << " requests (at most "
      << std::llround(kMaxRequests) << "); lower --keys, --duration or --load";
    return usage_error(m.str());
  }

  // Generated lazily, one pattern in memory at a time; a trace is read first so that a
  // malformed file fails before any table is printed.
  std::vector<std::function<Traffic()>> patterns;
  if (all || pattern == "boundary") patterns.push_back([&] { return BoundaryBurst(policy); });
  if (all || pattern == "poisson") {
    for (double l : loads) {
      patterns.push_back([&, l] { return Poisson(policy, l, keys, *duration, seed); });
    }
  }
  if (all || pattern == "onoff") {
    patterns.push_back([&] { return OnOff(policy, on_load, on, off, keys, *duration, seed); });
  }
  if (!trace_path.empty() && (all || pattern == "trace")) {
    auto t = LoadTrace(trace_path);
    if (!t.ok()) return usage_error(t.status().message());
    if (Status s = CheckTraffic(*t, policy, trace_path); !s.ok()) return usage_error(s.message());
    // Draw until the last request has left the window.
    t->end = std::max(t->end, t->requests.back().t + policy.window);
    auto shared = std::make_shared<Traffic>(std::move(*t));
    patterns.push_back([shared] { return std::move(*shared); });
  }

  for (const auto& make : patterns) {
    const Traffic traffic = make();
    RunOptions options;
    if (!svg_path.empty()) options.bin_width = NiceBinWidth(traffic.end - traffic.begin);
    auto runs = RunTraffic(traffic, policy, options);
    if (!runs.ok()) {
      err << "sluice simulate: " << runs.status().message() << "\n";
      return runs.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
    }
    out << FormatTable(traffic, policy, *runs) << "\n";
    if (!svg_path.empty()) {
      const std::string path = SvgPath(svg_path, traffic.id, patterns.size() > 1);
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << RenderSvg(traffic, policy, *runs);
      f.close();
      if (!f) {
        err << "sluice simulate: cannot write '" << path << "'\n";
        return 1;
      }
      out << "wrote " << path << "\n\n";
    }
  }
  out << kLegend;
  return 0;
}

int RunSimulate(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return Simulate(args, std::cout, std::cerr);
}

}  // namespace sluice::cli
