// sluice: the command-line tool. `sluice <command> [flags]`; `sluice <command> --help`.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/commands.h"
#include "sluice_version.h"

namespace {

using sluice::cli::Command;

constexpr Command kCommands[] = {
    {"simulate", "run traffic patterns through every algorithm with a simulated clock",
     sluice::cli::RunSimulate},
    {"check", "take units for a key from a policy in Redis and print the decision",
     sluice::cli::RunCheck},
    {"peek", "print what a key would get now, without consuming anything", sluice::cli::RunPeek},
    {"reset", "forget a key under a policy: its full limit is available again",
     sluice::cli::RunReset},
    {"bench",
     "load tool: N concurrent callers against Redis (or memory://), decisions/s and "
     "latency",
     sluice::cli::RunBenchCommand},
};

void Usage(std::FILE* out) {
  std::fprintf(out, "usage: sluice <command> [flags]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'sluice <command> --help' describes a command's flags.\n");
  std::fprintf(out, "'sluice --version' prints the version.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    // With no arguments, show the article's finding at once.
    char name[] = "simulate";
    char* args[] = {name, nullptr};
    return sluice::cli::RunSimulate(1, args);
  }
  const std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    Usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("sluice %s\n", SLUICE_VERSION);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (cmd == c.name) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
  Usage(stderr);
  return 2;
}
