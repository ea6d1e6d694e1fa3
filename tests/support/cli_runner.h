// Runs a built binary (e.g. the `sluice` CLI) with arguments and captures its exit
// status, stdout, stderr and wall time. Header-only: the binary's path comes from the
// test's compile definitions.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::testing {

struct CliOutcome {
  int rc = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
  std::chrono::milliseconds took{0};

  std::string Describe() const {
    return "exit " + std::to_string(rc) + "\nstdout: " + out + "\nstderr: " + err;
  }
};

inline CliOutcome RunCli(const std::string& binary, const std::vector<std::string>& args) {
  auto read = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  char dir[] = "/tmp/sluice-cli-run.XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, STDOUT_FILENO);
    dup2(e, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  CliOutcome r;
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read(out_path);
  r.err = read(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir);
  return r;
}

// The integer after "KEY": in a one-line JSON object (e.g. `sluice bench --json`), or -1
// when the key is absent.
inline long long JsonInteger(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const auto at = json.find(k);
  if (at == std::string::npos) return -1;
  return std::strtoll(json.c_str() + at + k.size(), nullptr, 10);
}

// `sluice bench` on `url`: `requests` decisions from 4 callers, summary as JSON. The
// deadlines are generous: the tests check what it decides, not how fast.
inline CliOutcome RunBench(const std::string& binary, const std::string& url, int requests = 300) {
  return RunCli(binary, {"bench", "--redis", url, "--requests", std::to_string(requests), "-c", "4",
                         "--json", "-q", "--connect-timeout", "5s", "--timeout", "5s"});
}

// What is wrong with a RunBench outcome ("" when it exited 0 having made exactly
// `requests` decisions, some allowed, none an error).
inline std::string BenchProblems(const CliOutcome& b, int requests = 300) {
  std::string p;
  if (b.rc != 0) p += "exit " + std::to_string(b.rc) + "; ";
  if (JsonInteger(b.out, "decisions") != requests)
    p += "decisions != " + std::to_string(requests) + "; ";
  if (JsonInteger(b.out, "allowed") <= 0) p += "nothing allowed; ";
  if (JsonInteger(b.out, "error_total") != 0) p += "errors; ";
  return p;
}

}  // namespace sluice::testing
