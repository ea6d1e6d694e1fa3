// Internal: the subcommands of the `sluice` command-line tool. Each takes the
// arguments after its name (argv[0] is the subcommand name) and returns an exit code:
// 0 success, 1 runtime failure, 2 bad usage (with a message naming what is wrong).
// check/peek/reset/bench: 0 allowed (or done), 1 denied, 2 bad usage, 3 store error.
#pragma once

namespace sluice::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

int RunSimulate(int argc, char** argv);
int RunCheck(int argc, char** argv);
int RunPeek(int argc, char** argv);
int RunReset(int argc, char** argv);
int RunBenchCommand(int argc, char** argv);

}  // namespace sluice::cli
