// Exactness under concurrency, shared by concurrency_test.cc (the shared server, or the
// cluster) and module_store_test.cc (a server with the native module): 4 processes x 8
// threads on one key per algorithm for a few seconds (and on until each process has
// seen a denial on every algorithm), deciding on Redis's clock. The total allowed must
// never exceed what each algorithm permits over the elapsed time.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "concurrency_policies.h"

namespace sluice::testing {

// The fleets of the multi-process tests: kFleetProcesses helpers, each running
// kFleetThreads threads for at least kFleetDurationMs.
inline constexpr int kFleetProcesses = 4;
inline constexpr int kFleetThreads = 8;
inline constexpr int kFleetDurationMs = 2500;

// Starts kFleetProcesses of `helper` with the arguments "'<url>' <mode> <duration-ms>
// <threads>" (`mode` empty: left out), each with its output on a pipe (popen); null
// entries for those that could not start.
inline std::vector<FILE*> StartFleet(const std::string& helper, const std::string& url,
                                     const std::string& mode = "") {
  std::vector<FILE*> pipes;
  for (int i = 0; i < kFleetProcesses; ++i) {
    const std::string cmd = helper + " '" + url + "' " + (mode.empty() ? "" : mode + " ") +
                            std::to_string(kFleetDurationMs) + " " + std::to_string(kFleetThreads);
    pipes.push_back(popen(cmd.c_str(), "r"));
    EXPECT_NE(pipes.back(), nullptr) << cmd;
  }
  return pipes;
}

// Runs a fleet of SLUICE_LOAD_HELPER against `url` and expects each
// algorithm's total allowed within its bound, the limit reached, and no error.
inline void ExpectManyProcessesWithinTheLimit(const std::string& url) {
  struct Counts {
    long allowed = 0, denied = 0, errors = 0;
  };
  const auto start = std::chrono::system_clock::now();
  const std::vector<FILE*> pipes = StartFleet(SLUICE_LOAD_HELPER, url);
  std::map<std::string, Counts> total;
  for (FILE* f : pipes) {
    if (f == nullptr) continue;
    char name[64];
    Counts c;
    int lines = 0;
    while (std::fscanf(f, "%63s %ld %ld %ld", name, &c.allowed, &c.denied, &c.errors) == 4) {
      Counts& t = total[name];
      t.allowed += c.allowed;
      t.denied += c.denied;
      t.errors += c.errors;
      ++lines;
    }
    EXPECT_EQ(pclose(f), 0);
    EXPECT_EQ(lines, 5) << "a helper process failed";
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::system_clock::now() - start).count();

  // Every bound below is for "limit per 1 s" over `elapsed` seconds (an upper bound on
  // the time the helpers ran, as measured on the clock Redis also reads).
  const double limit = kConcurrencyLimit;
  const double windows_touched = std::ceil(elapsed) + 1;  // epoch-aligned 1 s windows
  const std::map<std::string, double> bound = {
      // At most `limit` per aligned window.
      {"fixed", limit * windows_touched},
      // Exact: at most `limit` in any 1 s, so in consecutive 1 s slices.
      {"log", limit * (std::floor(elapsed) + 1)},
      // curr <= limit in every aligned window (the weighted previous window only
      // lowers it), so at most the fixed window's bound; docs/redis.md explains it.
      {"counter", limit * windows_touched},
      // A full bucket of `limit` plus the refill.
      {"bucket", limit + limit * elapsed},
      {"gcra", limit + limit * elapsed + 1},
  };
  for (const auto& [name, b] : bound) {
    const Counts& c = total[name];
    SCOPED_TRACE(name);
    EXPECT_EQ(c.errors, 0);
    // The limit must have been reached for the bound to mean anything: each helper goes
    // on past its duration until it has been denied on every algorithm (at most 60 s).
    EXPECT_GT(c.denied, 0) << "the load never reached the limit";
    EXPECT_GT(c.allowed, 0);
    EXPECT_LE(c.allowed, b) << "allowed " << c.allowed << " in " << elapsed << " s";
    std::printf("%-8s allowed %6ld denied %7ld (bound %.0f, %.2f s)\n", name.c_str(), c.allowed,
                c.denied, b, elapsed);
  }
}

}  // namespace sluice::testing
