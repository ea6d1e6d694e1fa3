// A real redis-server for tests: started on a free loopback port in a temporary
// directory, stopped (and the directory removed) when the object is destroyed.
//
//   auto server = sluice::testing::RedisServer::Start();
//   ASSERT_TRUE(server.ok()) << server.status().ToString();   // missing binary: fails
//   auto store = sluice::RedisStore::Create({.url = (*server)->Url()});
//
// Start and Restart from a long-lived thread (the server gets PR_SET_PDEATHSIG: it
// dies with the thread that forked it).
//
// Fault injection: Pause() (SIGSTOP), Resume() (SIGCONT), Stop() (SIGKILL),
// Restart() (a fresh process on the same port, empty), Command() to send anything
// (SCRIPT FLUSH, CLIENT KILL, PTTL ...). Never assumes a server is already running.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "redis/connection.h"
#include "sluice/clock.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::testing {

// The store call deadline of tests about what is decided, not about when: generous for a
// loaded 2-core CI machine, so that a slow moment never turns such a test into a timeout
// test. Tests of deadlines set their own.
inline constexpr Micros kPatientCallTimeout = 5'000'000;

// A RedisStore on the Redis at `url` (any URL RedisStore takes) with kPatientCallTimeout: for
// tests that hand a store to an engine or a limiter and assert what it decides.
Result<std::shared_ptr<Store>> OpenPatientStore(const std::string& url);

// The server binary the tests start when they name none: $SLUICE_TEST_REDIS_SERVER when
// set (e.g. valkey-server, to run the Redis suites on Valkey), else redis-server.
std::string DefaultRedisServerBinary();

struct RedisServerOptions {
  // requirepass, when not empty (Url() then carries it).
  std::string password;
  // Extra redis-server arguments, e.g. {"--maxmemory-policy", "allkeys-lru"}.
  std::vector<std::string> args;
  // The binary; found on PATH when not absolute.
  std::string binary = DefaultRedisServerBinary();
  // The port to listen on; 0: a free one (FreeLoopbackPort).
  int port = 0;
  // Bound on waiting for the server to answer PING.
  int start_timeout_ms = 10'000;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back,
// close). Every server the test support starts listens on one.
Result<int> FreeLoopbackPort();

class RedisServer {
 public:
  // Picks a free port (bind 127.0.0.1:0), starts redis-server with --port P --save ''
  // --appendonly no --daemonize no --repl-diskless-sync-delay 0 (and a unix socket) in a new
  // temporary directory, and polls PING until it answers. Errors say why (binary missing, did not
  // start).
  static Result<std::unique_ptr<RedisServer>> Start(RedisServerOptions options = {});
  // Kills the server (even while paused) and removes its directory.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // redis://[:password@]127.0.0.1:PORT
  std::string Url() const;
  // unix:///tmp/.../redis.sock
  std::string UnixUrl() const;

  // SIGKILL and wait; the port is then refused until Restart.
  void Stop();
  // SIGSTOP: the server keeps its connections but answers nothing.
  void Pause();
  // SIGCONT.
  void Resume();
  // Stops the server if running and starts a new, empty one on the same port.
  Status Restart();

  // Sends one command on a fresh connection (bounded by 5 s); error replies are
  // returned as replies (check Reply::is_error()).
  Result<redis::Reply> Command(const std::vector<std::string>& args) const;

  // How many times `command` (lower case, e.g. "incrby") ran since the server started or
  // its last CONFIG RESETSTAT, from INFO commandstats: 0 when it never ran, -1 when the
  // server did not answer.
  long long CommandCalls(const std::string& command) const;

  // The clients connected now (INFO clients), not counting the connection that asks; -1
  // when the server did not answer.
  int ConnectedClients() const;

 private:
  RedisServer() = default;
  Status Launch();

  RedisServerOptions options_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::testing
