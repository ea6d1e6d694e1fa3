// Test support: child processes (sluiced, nginx), temp dirs, free ports and bounded
// polling. Nothing here sleeps to make time pass; waits poll a condition with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice::testing {

// A child process whose stdout and stderr go to `log_path`. Killed (SIGKILL) on
// destruction if still running.
class Process {
 public:
  // Fails the current test (and returns nullptr) if the program cannot be started.
  static std::unique_ptr<Process> Spawn(const std::vector<std::string>& argv,
                                        const std::string& log_path);
  ~Process();
  pid_t pid() const { return pid_; }
  // Sends `sig`. For SIGSTOP, returns once every thread is stopped (bounded by 10 s).
  void Signal(int sig) const;
  // Waits for exit up to `timeout`; returns the exit code, 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// A fresh directory under /tmp, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
// Writes atomically (temp file + rename), like an editor or a config management tool.
void WriteFile(const std::string& path, const std::string& text);
// WaitUntil (wait.h) with a 10 s default bound.
bool WaitFor(const std::function<bool()>& cond,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));
// FreeLoopbackPort (redis_server.h), failing the current test (and returning 0) when
// there is none.
int FreePort();

// The sluiced binary under test: $SLUICED_TEST_BINARY when set (to run these tests
// against another build, e.g. to see a test fail before a fix), else this build's.
std::string SluicedBinary();

// A sluiced child process and its ports (parsed from its "started" log line).
struct Sluiced {
  std::unique_ptr<Process> process;
  std::string log;
  int http_port = 0;
  int grpc_port = 0;
  std::string LogText() const { return ReadFile(log); }
};
// Starts sluiced with `config_file`, HTTP and gRPC on 127.0.0.1:0 and `extra` flags; waits
// until it has started. Fails the test (returns an empty Sluiced) when it does not.
// `extra` may give --http or --grpc (as "--grpc ADDR" or "--grpc=ADDR", on 127.0.0.1),
// e.g. to start sluiced again on the gRPC port it had: that one then replaces the default.
Sluiced StartSluiced(const std::string& config_file, const std::string& log_path,
                     const std::vector<std::string>& extra = {});

}  // namespace sluice::testing
