// Tests of `sluice simulate`: the traffic patterns, the replay through the five
// algorithms, the error accounting, trace parsing and the command's flags.
#include "cli/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sluice::cli {
namespace {

constexpr Micros kSec = 1'000'000;
constexpr Micros kMin = 60 * kSec;

enum Row { kFixed = 0, kLog = 1, kCounter = 2, kBucket = 3, kGcra = 4 };

std::vector<AlgorithmRun> Replay(const Traffic& t, const SimPolicy& p, RunOptions o = {}) {
  auto r = RunTraffic(t, p, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<AlgorithmRun>(5);
}

struct Output {
  int rc;
  std::string out;
  std::string err;
};

Output Sim(std::vector<std::string> args) {
  args.insert(args.begin(), "simulate");
  std::ostringstream out, err;
  const int rc = Simulate(args, out, err);
  return {rc, out.str(), err.str()};
}

Result<Traffic> ParseText(const std::string& text) {
  std::istringstream in(text);
  return ParseTrace(in, "t.trace");
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

// --- The article's finding --------------------------------------------------------

TEST(BoundaryBurst, ReproducesTheArticle) {
  const SimPolicy p{.limit = 100, .window = kMin};
  const Traffic t = BoundaryBurst(p);
  ASSERT_EQ(t.requests.size(), 200u);
  // 100 at 12:00:59, 100 at 12:01:00 (2026-07-30 UTC).
  EXPECT_EQ(t.requests.front().t, kSimStart + 59 * kSec);
  EXPECT_EQ(t.requests[100].t, kSimStart + 60 * kSec);
  const auto runs = Replay(t, p, {.keep_allowed_times = true});
  ASSERT_EQ(runs.size(), 5u);
  EXPECT_EQ(runs[kFixed].algorithm, Algorithm::kFixedWindow);

  // The fixed window lets 200 through within about one second against 100/min.
  const AlgorithmRun& fixed = runs[kFixed];
  EXPECT_EQ(fixed.allowed, 200u);
  EXPECT_EQ(fixed.max_in_window, 200u);
  ASSERT_EQ(fixed.allowed_times.size(), 200u);
  EXPECT_LE(fixed.allowed_times.back() - fixed.allowed_times.front(), 1100 * 1000);
  // The second hundred all went over the limit of the exact rule.
  EXPECT_EQ(fixed.wrongly_allowed, 100u);
  EXPECT_EQ(fixed.wrongly_denied, 0u);

  // The sliding log allows exactly 100 and is, by definition, never wrong.
  const AlgorithmRun& log = runs[kLog];
  EXPECT_EQ(log.allowed, 100u);
  EXPECT_EQ(log.denied, 100u);
  EXPECT_EQ(log.max_in_window, 100u);
  EXPECT_EQ(log.wrongly_allowed + log.wrongly_denied, 0u);

  // The counter weighs the full previous minute: no boundary pass either.
  EXPECT_EQ(runs[kCounter].allowed, 100u);
  // Bucket and GCRA: the full burst, plus what refilled in one second (100/60).
  EXPECT_EQ(runs[kBucket].allowed, 101u);
  EXPECT_EQ(runs[kGcra].allowed, 101u);
}

TEST(BoundaryBurst, FollowsOtherLimitsAndWindows) {
  for (std::uint64_t limit : {1u, 10u, 500u}) {
    for (Micros window : {10 * kSec, kMin, 3600 * kSec}) {
      const SimPolicy p{.limit = limit, .window = window};
      const auto runs = Replay(BoundaryBurst(p), p);
      EXPECT_EQ(runs[kFixed].allowed, 2 * limit) << limit << " per " << window;
      EXPECT_EQ(runs[kFixed].max_in_window, 2 * limit);
      EXPECT_EQ(runs[kLog].allowed, limit);
      EXPECT_EQ(runs[kLog].max_in_window, limit);
    }
  }
}

// --- Accounting against the exact rule --------------------------------------------

TEST(Accounting, SlidingLogIsExactAndOthersAreMeasured) {
  const SimPolicy p{.limit = 20, .window = 10 * kSec};
  for (const Traffic& t :
       {Poisson(p, 2.0, 50, 2 * kMin, 3), OnOff(p, 8.0, 2 * kSec, 8 * kSec, 50, 2 * kMin, 3)}) {
    const auto runs = Replay(t, p);
    for (const AlgorithmRun& r : runs) {
      EXPECT_EQ(r.allowed + r.denied, t.requests.size()) << AlgorithmName(r.algorithm);
    }
    EXPECT_EQ(runs[kLog].wrongly_allowed, 0u) << t.id;
    EXPECT_EQ(runs[kLog].wrongly_denied, 0u) << t.id;
    EXPECT_LE(runs[kLog].max_in_window, p.limit) << t.id;
    // Over twice the limit, the others do go over the exact limit somewhere; an
    // algorithm that admitted more than the limit in a window must have errors counted.
    for (const AlgorithmRun& r : runs) {
      if (r.max_in_window > p.limit) {
        EXPECT_GT(r.wrongly_allowed, 0u) << AlgorithmName(r.algorithm) << " " << t.id;
      }
    }
    EXPECT_GT(runs[kFixed].max_in_window, p.limit) << t.id;
    EXPECT_GT(runs[kBucket].max_in_window, p.limit) << t.id;
    // Bucket and GCRA with the same rate and burst decide alike.
    EXPECT_EQ(runs[kBucket].allowed, runs[kGcra].allowed) << t.id;
  }
}

TEST(Accounting, WronglyDeniedMeansTheKeyHadRoom) {
  // The sliding counter assumes the previous window's requests were spread evenly. Here
  // they all came at its start, so they have left the sliding window while the counter
  // still weighs them: the exact log has room, the counter denies.
  std::string text;
  for (int i = 0; i < 10; ++i) text += "1000000000." + std::to_string(100 + i) + " k\n";
  // 1000000015.5: the previous window [1000000000, 1000000010) holds 10, weighted by
  // (10 - 5.5) / 10 = 0.45, so the counter estimates 4.5 while the exact log is empty.
  for (int i = 0; i < 10; ++i) text += "1000000015." + std::to_string(500 + i) + " k\n";
  auto t = ParseText(text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SimPolicy p{.limit = 10, .window = 10 * kSec};
  const auto runs = Replay(*t, p);
  EXPECT_EQ(runs[kLog].allowed, 20u);
  EXPECT_EQ(runs[kCounter].allowed, 15u);  // 10, then 10 - ceil(4.5) = 5
  EXPECT_EQ(runs[kCounter].wrongly_denied, 5u);
  EXPECT_EQ(runs[kCounter].wrongly_allowed, 0u);
}

// --- Patterns ----------------------------------------------------------------------

TEST(Patterns, PoissonAtHalfTheLimitIsAlmostNeverDenied) {
  const SimPolicy p{.limit = 100, .window = kMin};
  const Traffic t = Poisson(p, 0.5, 200, 10 * kMin, 1);
  // 200 keys x 50/min x 10 min = 100000 expected.
  EXPECT_NEAR(static_cast<double>(t.requests.size()), 100000.0, 3000.0);
  const auto runs = Replay(t, p);
  EXPECT_LE(runs[kLog].denied * 1000, t.requests.size());
  EXPECT_LE(runs[kCounter].denied * 1000, t.requests.size());
  EXPECT_LE(runs[kCounter].wrongly_allowed + runs[kCounter].wrongly_denied, 10u);
}

TEST(Patterns, PoissonIsSortedAndDeterministic) {
  const SimPolicy p{.limit = 10, .window = 10 * kSec};
  const Traffic a = Poisson(p, 1.0, 20, kMin, 42);
  const Traffic b = Poisson(p, 1.0, 20, kMin, 42);
  const Traffic c = Poisson(p, 1.0, 20, kMin, 43);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  EXPECT_TRUE(std::equal(a.requests.begin(), a.requests.end(), b.requests.begin(),
                         [](const Request& x, const Request& y) {
                           return x.t == y.t && x.key == y.key && x.cost == y.cost;
                         }));
  EXPECT_TRUE(a.requests.size() != c.requests.size() || a.requests[0].t != c.requests[0].t);
  EXPECT_TRUE(std::is_sorted(a.requests.begin(), a.requests.end(),
                             [](const Request& x, const Request& y) { return x.t < y.t; }));
  for (const Request& r : a.requests) {
    EXPECT_GE(r.t, a.begin);
    EXPECT_LT(r.t, a.end);
  }
}

TEST(Patterns, OnOffSendsOnlyDuringBursts) {
  const SimPolicy p{.limit = 60, .window = kMin};
  const Micros on = 15 * kSec, off = 45 * kSec;
  const Traffic t = OnOff(p, 8.0, on, off, 1, 10 * kMin, 5);
  // 8 x 60/min for 15 s of every minute: about 120 per minute, 1200 in 10 minutes.
  EXPECT_NEAR(static_cast<double>(t.requests.size()), 1200.0, 150.0);
  // One key: the requests fall in bursts no longer than `on`, `off` apart.
  Micros burst_start = t.requests.front().t;
  for (std::size_t i = 1; i < t.requests.size(); ++i) {
    const Micros gap = t.requests[i].t - t.requests[i - 1].t;
    if (gap >= off) {
      burst_start = t.requests[i].t;
    } else {
      EXPECT_LT(t.requests[i].t - burst_start, on) << i;
    }
  }
}

// --- Trace files --------------------------------------------------------------------

TEST(Trace, ParsesAGoodFile) {
  auto t = ParseText(
      "# comment\n"
      "\n"
      "1785412859.25 user:1\n"
      "   1785412859 \t user:2   3\r\n"
      "1785412860.000001 user:1 2\n"
      "1785412858 user:3\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 4u);
  EXPECT_EQ(t->keys, (std::vector<std::string>{"user:1", "user:2", "user:3"}));
  // Replayed in time order; exact microseconds, no floating point rounding.
  EXPECT_EQ(t->requests[0].t, 1785412858 * kSec);
  EXPECT_EQ(t->requests[0].line, 6u);
  EXPECT_EQ(t->requests[1].t, 1785412859 * kSec);
  EXPECT_EQ(t->requests[1].cost, 3u);
  EXPECT_EQ(t->requests[1].key, 1u);
  EXPECT_EQ(t->requests[2].t, 1785412859 * kSec + 250000);
  EXPECT_EQ(t->requests[3].t, 1785412860 * kSec + 1);
  EXPECT_EQ(t->requests[3].cost, 2u);
}

TEST(Trace, MalformedLinesNameTheLine) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"1 a\nonly-one-field\n", "t.trace:2: expected 'TIMESTAMP KEY [COST]'"},
      {"1 a 1 extra\n", "t.trace:1: expected 'TIMESTAMP KEY [COST]'"},
      {"\n\n12:00:01 a\n", "t.trace:3: timestamp '12:00:01' is not seconds"},
      {"-5 a\n", "t.trace:1: timestamp '-5'"},
      {"1.1234567 a\n", "t.trace:1: timestamp '1.1234567'"},
      {"1e9 a\n", "t.trace:1: timestamp '1e9'"},
      // Found by the trace fuzzer: seconds * 10^6 overflowed int64 (UB), accepted.
      {"17854785412810 a\n", "t.trace:1: timestamp '17854785412810'"},
      {"1 a 0\n", "t.trace:1: cost '0' is not an integer >= 1"},
      {"1 a x\n", "t.trace:1: cost 'x'"},
      {"1 a -2\n", "t.trace:1: cost '-2'"},
      {"# nothing\n\n", "t.trace: no requests"},
  };
  for (const Case& c : cases) {
    auto t = ParseText(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.error), std::string::npos)
        << "got: " << t.status().message() << "\nwanted: " << c.error;
  }
  auto long_key = ParseText("1 a\n2 " + std::string(257, 'k') + "\n");
  ASSERT_FALSE(long_key.ok());
  EXPECT_NE(long_key.status().message().find("t.trace:2: key is 257 bytes"), std::string::npos);
}

TEST(Trace, CostAboveTheLimitNamesTheLine) {
  auto t = ParseText("1 a\n2 a 5\n3 a 11\n");
  ASSERT_TRUE(t.ok());
  const SimPolicy p{.limit = 10, .window = kSec};
  const Status s = CheckTraffic(*t, p, "t.trace");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.trace:3: cost 11 is more than the limit 10"), std::string::npos)
      << s.message();
  EXPECT_TRUE(CheckTraffic(*t, SimPolicy{.limit = 11, .window = kSec}, "t.trace").ok());
  // A smaller bucket burst is the binding capacity.
  EXPECT_FALSE(CheckTraffic(*t, SimPolicy{.limit = 20, .window = kSec, .burst = 6}, "x").ok());
}

// --- The command ---------------------------------------------------------------------

TEST(Command, DefaultIsTheBoundaryBurstTable) {
  const Output o = Sim({});
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("boundary burst: 100 requests at 12:00:59, 100 at 12:01:00"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("max in 1m window"), std::string::npos);
  for (const char* name :
       {"fixed_window", "sliding_window_log", "sliding_window_counter", "token_bucket", "gcra"}) {
    EXPECT_NE(o.out.find(name), std::string::npos) << name;
  }
  EXPECT_NE(o.out.find("200 / 100"), std::string::npos) << o.out;
}

TEST(Command, SameSeedSameOutput) {
  const std::vector<std::string> args = {"-p",         "all", "--keys", "30",
                                         "--duration", "3m",  "--seed", "7"};
  const Output a = Sim(args);
  const Output b = Sim(args);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto other = args;
  other.back() = "8";
  EXPECT_NE(Sim(other).out, a.out);
  EXPECT_NE(a.out.find("steady Poisson traffic at 0.5x"), std::string::npos);
  EXPECT_NE(a.out.find("steady Poisson traffic at 2x"), std::string::npos);
  EXPECT_NE(a.out.find("on/off bursts"), std::string::npos);
}

TEST(Command, BadFlagsAreUsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"--no-such-flag"},
      {"--limit", "abc"},
      {"--limit", "0"},
      {"--limit", "-3"},
      {"--window", "0s"},
      {"--window", "soon"},
      {"--duration", "5"},
      {"--pattern", "nope"},
      {"--pattern", "trace"},
      {"--keys", "0"},
      {"--load", "0.5,x"},
      {"--limit"},
      {"stray"},
      {"--trace", "/nonexistent/sluice.trace"},
      {"--keys", "10000000", "--duration", "1d", "-p", "poisson"},
      {"-p", "onoff", "--on", "1us", "--off", "0us", "--on-load", "0.001"},
  };
  for (const auto& args : bad) {
    const Output o = Sim(args);
    EXPECT_EQ(o.rc, 2) << args[0] << " " << (args.size() > 1 ? args[1] : "");
    EXPECT_NE(o.err.find("sluice simulate: "), std::string::npos) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  EXPECT_NE(Sim({"--window", "soon"}).err.find("--window"), std::string::npos);
  EXPECT_NE(Sim({"--window", "0s"}).err.find("--window must be between 1ms and 366d"),
            std::string::npos);
  EXPECT_NE(Sim({"--limit", "abc"}).err.find("--limit"), std::string::npos);
  EXPECT_NE(Sim({"--pattern", "trace"}).err.find("needs --trace FILE"), std::string::npos);
}

TEST(Command, HelpDescribesFlagsAndTraceFormat) {
  const Output o = Sim({"--help"});
  EXPECT_EQ(o.rc, 0);
  for (const char* s : {"--pattern", "--limit", "--window", "--keys", "--seed", "--svg", "--trace",
                        "TIMESTAMP KEY [COST]"}) {
    EXPECT_NE(o.out.find(s), std::string::npos) << s;
  }
}

TEST(Command, MalformedTraceFileNamesItsLine) {
  const std::string path = TempPath("bad.trace");
  std::ofstream(path) << "1785412859 user:1\n1785412859.5 user:1 two\n";
  const Output o = Sim({"--trace", path});
  EXPECT_EQ(o.rc, 2);
  EXPECT_NE(o.err.find(path + ":2: cost 'two'"), std::string::npos) << o.err;
}

TEST(Command, TraceFileRunsThroughEveryAlgorithm) {
  const std::string path = TempPath("burst.trace");
  {
    std::ofstream f(path);
    for (int i = 0; i < 5; ++i) f << "1785412859." << i << " user:1\n";
    for (int i = 0; i < 5; ++i) f << "1785412860." << i << " user:1\n";
  }
  const Output o = Sim({"--trace", path, "--limit", "5"});
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("trace " + path + " (10 requests, one key)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("10 / 5"), std::string::npos) << o.out;  // the fixed window
}

TEST(Command, SvgHasOneLanePerAlgorithmAndTheLimit) {
  const std::string path = TempPath("boundary.svg");
  const Output o = Sim({"--svg", path});
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("wrote " + path), std::string::npos);
  std::ifstream f(path);
  std::stringstream svg;
  svg << f.rdbuf();
  const std::string s = svg.str();
  EXPECT_EQ(s.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_NE(s.find("fixed_window: allowed 200 of 200, at most 200 in one 1m window"),
            std::string::npos);
  EXPECT_NE(s.find("sliding_window_log: allowed 100 of 200"), std::string::npos);
  std::size_t polylines = 0;
  for (std::size_t i = s.find("<polyline"); i != std::string::npos; i = s.find("<polyline", i + 1))
    ++polylines;
  EXPECT_EQ(polylines, 5u);
  EXPECT_NE(s.find("limit 100"), std::string::npos);
}

TEST(Command, SvgForSeveralPatternsWritesOneFileEach) {
  const std::string path = TempPath("p.svg");
  const Output o = Sim({"-p", "poisson", "--keys", "5", "--duration", "2m", "--svg", path});
  ASSERT_EQ(o.rc, 0) << o.err;
  for (const char* id : {"p-poisson-0.5x.svg", "p-poisson-1x.svg", "p-poisson-2x.svg"}) {
    EXPECT_TRUE(std::ifstream(TempPath(id)).good()) << id;
  }
}

TEST(Command, UnwritableSvgIsARuntimeFailure) {
  const Output o = Sim({"--svg", "/nonexistent-dir/x.svg"});
  EXPECT_EQ(o.rc, 1);
  EXPECT_NE(o.err.find("cannot write '/nonexistent-dir/x.svg'"), std::string::npos) << o.err;
}

TEST(Format, Durations) {
  EXPECT_EQ(FormatDuration(kMin), "1m");
  EXPECT_EQ(FormatDuration(10 * kSec), "10s");
  EXPECT_EQ(FormatDuration(90 * kMin), "1h30m");
  EXPECT_EQ(FormatDuration(1500 * 1000), "1.5s");
  EXPECT_EQ(FormatDuration(250 * 1000), "250ms");
  EXPECT_EQ(FormatDuration(86400 * kSec), "1d");
}

TEST(Format, NiceBinWidth) {
  EXPECT_EQ(NiceBinWidth(2 * kMin), kSec);
  EXPECT_EQ(NiceBinWidth(10 * kMin), 5 * kSec);
  EXPECT_LE((3 * kMin + 7) / NiceBinWidth(3 * kMin + 7), 150);
}

}  // namespace
}  // namespace sluice::cli
