// Test support for tests that run programs: child processes, files, ports, waits.
#include "process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

#include "redis_server.h"
#include "wait.h"

extern char** environ;

namespace sluice::testing {

std::unique_ptr<Process> Process::Spawn(const std::vector<std::string>& argv,
                                        const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    return nullptr;
  }
  auto p = std::unique_ptr<Process>(new Process());
  p->pid_ = pid;
  return p;
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

namespace {

// True when every thread of `pid` is stopped ('T' or 't' in /proc/PID/task/*/stat).
bool AllThreadsStopped(pid_t pid) {
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  bool any = false;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream f(t.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    const char state = stat[paren + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return !ec && any;
}

}  // namespace

void Process::Signal(int sig) const {
  if (reaped_) return;
  ::kill(pid_, sig);
  if (sig != SIGSTOP) return;
  // A stop is delivered to each thread when it next runs: on a loaded machine a thread
  // can still answer a request after kill() returned. Wait for the event (every thread
  // stopped), bounded.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!AllThreadsStopped(pid_) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool Process::running() {
  if (reaped_) return false;
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

int Process::Wait(std::chrono::milliseconds timeout) {
  if (!WaitFor([this] { return !running(); }, timeout)) return -1;
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/sluiced-test-XXXXXX";
  const char* p = ::mkdtemp(tmpl);
  EXPECT_NE(p, nullptr);
  path_ = p ? p : "/tmp";
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(tmp, path);
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  return WaitUntil(cond, timeout);
}

int FreePort() {
  auto port = FreeLoopbackPort();
  if (!port.ok()) {
    ADD_FAILURE() << port.status().ToString();
    return 0;
  }
  return *port;
}

std::string SluicedBinary() {
  const char* env = std::getenv("SLUICED_TEST_BINARY");
  if (env != nullptr && *env != '\0') return env;
#ifdef SLUICED_BINARY
  return SLUICED_BINARY;
#else
  ADD_FAILURE() << "this build has no sluiced; set SLUICED_TEST_BINARY";
  return "sluiced";
#endif
}

Sluiced StartSluiced(const std::string& config_file, const std::string& log_path,
                     const std::vector<std::string>& extra) {
  Sluiced s;
  s.log = log_path;
  std::vector<std::string> argv = {SluicedBinary(), "--config", config_file};
  for (const std::string flag : {"--http", "--grpc"}) {
    // Given in `extra` as "--grpc ADDR" or "--grpc=ADDR": that one, not the default.
    const bool given = std::any_of(extra.begin(), extra.end(), [&](const std::string& a) {
      return a == flag || a.starts_with(flag + "=");
    });
    if (!given) argv.insert(argv.end(), {flag, "127.0.0.1:0"});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  s.process = Process::Spawn(argv, log_path);
  if (!s.process) return s;
  const std::regex started(R"(event=started .* http=127\.0\.0\.1:(\d+) grpc=127\.0\.0\.1:(\d+))");
  std::smatch m;
  const bool ok = WaitFor([&] {
    const std::string text = ReadFile(log_path);
    if (std::regex_search(text, m, started)) {
      s.http_port = std::stoi(m[1]);
      s.grpc_port = std::stoi(m[2]);
      return true;
    }
    return !s.process->running();
  });
  if (!ok || s.http_port == 0) {
    ADD_FAILURE() << "sluiced did not start; log:\n" << ReadFile(log_path);
  }
  return s;
}

}  // namespace sluice::testing
