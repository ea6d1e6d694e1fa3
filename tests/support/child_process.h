// A helper process with its stdin and stdout on pipes, for the multi-process tests
// (lease_test.cc, permit_fleet_test.cc): the test reads what the child prints, and
// ends it by closing its stdin or by a signal.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace sluice::testing {

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;  // the child's stdout
  int in = -1;          // the child's stdin (close it to end a child that waits on it)
};

// Starts `args[0]` (a path) with `args`; pid -1 on failure.
inline Child Spawn(const std::vector<std::string>& args) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0) return {};
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return {};
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  return Child{pid, fdopen(from_child[0], "r"), to_child[1]};
}

}  // namespace sluice::testing
