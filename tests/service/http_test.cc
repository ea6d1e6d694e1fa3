// sluiced's HTTP front end and operations as a hostile client or an operator meets them,
// through the real binary on loopback (issue #10): busy ports, slow clients, header
// floods, pipelining, repeated query pairs, big JSON bodies, the listen backlog, the
// connection cap, methods, a masked password, invalid UTF-8 over gRPC, gRPC health,
// readiness while Redis is down, and the SIGTERM drain.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "process.h"
#include "redis_server.h"

namespace sluice::testing {
namespace {

namespace pb = ::envoy::service::ratelimit::v3;
namespace health = ::grpc::health::v1;

const char* kConfig = R"(sluiced:
  reload_poll: 0
  default_algorithm: sliding_window_log
domain: rl
descriptors:
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: b
            rate_limit: {unit: hour, requests_per_unit: 5, name: a_b_b}
  - key: path
    value: "/x y"
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: fail_open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 10, failure_mode: fail_closed}
)";

// A raw TCP client: what curl and httplib hide (partial writes, pipelining, slowness).
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  bool Send(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Reads until `done(received)` or the peer closes or `timeout` passes without data.
  // Returns what was received; closed() says whether the peer closed.
  std::string ReadUntil(const std::function<bool(const std::string&)>& done,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done(in_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      in_.append(buf, static_cast<std::size_t>(n));
    }
    return in_;
  }
  // Reads until the peer closes.
  std::string ReadToClose(std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
    return ReadUntil([](const std::string&) { return false; }, timeout);
  }
  bool closed() const { return closed_; }
  std::string& received() { return in_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string in_;
};

// One complete HTTP response (with Content-Length) at the start of `s`, or 0.
std::size_t ResponseLength(const std::string& s) {
  const std::size_t end = s.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  const std::size_t cl = s.find("Content-Length: ");
  if (cl == std::string::npos || cl > end) return end + 4;
  const std::size_t body = std::stoul(s.substr(cl + 16));
  return s.size() >= end + 4 + body ? end + 4 + body : 0;
}

bool HasResponses(const std::string& s, int n) {
  std::size_t off = 0;
  for (int i = 0; i < n; ++i) {
    const std::size_t len = ResponseLength(s.substr(off));
    if (len == 0) return false;
    off += len;
  }
  return true;
}

class HttpFrontEnd : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& extra = {}) {
    config = dir.File("sluiced.yaml");
    WriteFile(config, kConfig);
    d = StartSluiced(config, dir.File("sluiced.log"), extra);
    ASSERT_GT(d.http_port, 0);
  }
  httplib::Client Http() {
    httplib::Client c("127.0.0.1", d.http_port);
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);
    return c;
  }
  std::string Metrics() {
    auto c = Http();
    auto r = c.Get("/metrics");
    return r ? r->body : "";
  }
  TempDir dir;
  std::string config;
  Sluiced d;
};

// Defect 1: a second sluiced on a busy HTTP or gRPC port must not start (gRPC and the old
// HTTP server set SO_REUSEPORT, so the kernel split the traffic between them). A failed
// start does not log "stopped" either.
TEST_F(HttpFrontEnd, BusyPortIsAStartupError) {
  Start();
  const std::string busy_http = "127.0.0.1:" + std::to_string(d.http_port);
  const std::string busy_grpc = "127.0.0.1:" + std::to_string(d.grpc_port);
  for (const auto& [http, grpc] : {std::pair{busy_http, std::string("127.0.0.1:0")},
                                   std::pair{std::string("127.0.0.1:0"), busy_grpc}}) {
    const std::string log = dir.File("second-" + std::to_string(d.http_port) + http + ".log");
    auto p =
        Process::Spawn({SluicedBinary(), "--config", config, "--http", http, "--grpc", grpc}, log);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->Wait(std::chrono::seconds(10)), 1) << ReadFile(log);
    const std::string text = ReadFile(log);
    EXPECT_NE(text.find("event=start_failed"), std::string::npos) << text;
    EXPECT_NE(text.find("cannot listen"), std::string::npos) << text;
    EXPECT_EQ(text.find("event=stopped"), std::string::npos) << text;
  }
  // The first one is untouched.
  EXPECT_EQ(Http().Get("/healthz")->status, 200);
}

TEST_F(HttpFrontEnd, ReusePortSharesAPortOnlyWhenAsked) {
  Start({"--reuse-port"});
  const std::string log = dir.File("second.log");
  auto p = Process::Spawn({SluicedBinary(), "--config", config, "--reuse-port", "--http",
                           "127.0.0.1:" + std::to_string(d.http_port), "--grpc",
                           "127.0.0.1:" + std::to_string(d.grpc_port)},
                          log);
  ASSERT_TRUE(p);
  EXPECT_TRUE(WaitFor([&] { return ReadFile(log).find("event=started") != std::string::npos; }))
      << ReadFile(log);
  EXPECT_TRUE(p->running());
}

// "Smaller things": a start that fails after the gRPC server is up (HTTP cannot bind an
// address this host does not have) says start_failed, not stopped.
TEST_F(HttpFrontEnd, FailedStartDoesNotLogStopped) {
  config = dir.File("sluiced.yaml");
  WriteFile(config, kConfig);
  const std::string log = dir.File("failed.log");
  auto p = Process::Spawn(
      {SluicedBinary(), "--config", config, "--http", "192.0.2.1:8080", "--grpc", "127.0.0.1:0"},
      log);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(10)), 1);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("event=start_failed"), std::string::npos) << text;
  EXPECT_EQ(text.find("event=stopped"), std::string::npos) << text;
  EXPECT_EQ(text.find("event=shutting_down"), std::string::npos) << text;
}

// Defect 2: slow clients (a byte now and then, never a whole request) held one server
// thread each; 150 of them froze /healthz and /nginx/auth for as long as they trickled.
TEST_F(HttpFrontEnd, SlowClientsDoNotFreezeTheApi) {
  Start();
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 150; ++i) {
    slow.push_back(std::make_unique<Raw>(d.http_port));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->Send("GET /healthz HTTP/1.1\r\nX-Slow: ");
  }
  std::atomic<bool> stop{false};
  // The slow clients' behaviour: one more header byte each every 200 ms.
  std::thread trickle([&] {
    while (!stop.load()) {
      for (auto& s : slow) s->Send("x");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  auto c = Http();
  auto r = c.Get("/healthz");
  const int healthz = r ? r->status : 0;
  httplib::Headers h = {{"X-Real-IP", "10.9.9.9"}};
  r = c.Get("/nginx/auth/rl", h);
  const int nginx = r ? r->status : 0;
  r = c.Get("/v1/check?domain=rl&key=remote_address&value=1.2.3.4");
  const int check = r ? r->status : 0;
  stop = true;
  trickle.join();
  EXPECT_EQ(healthz, 200);
  EXPECT_EQ(nginx, 200);
  EXPECT_EQ(check, 200);
}

// A client that never finishes its request is disconnected after the request timeout,
// however often it sends a byte.
TEST_F(HttpFrontEnd, RequestTimeoutDisconnectsATricklingClient) {
  Start({"--http-request-timeout", "1"});
  Raw slow(d.http_port);
  ASSERT_TRUE(slow.connected());
  slow.Send("GET /healthz HTTP/1.1\r\nX-Slow: ");
  bool closed = false;
  for (int i = 0; i < 150 && !closed; ++i) {  // bounded: 150 x 100 ms
    if (!slow.Send("x")) closed = true;
    slow.ReadUntil([](const std::string&) { return false; }, std::chrono::milliseconds(100));
    closed = closed || slow.closed();
  }
  EXPECT_TRUE(closed);
  EXPECT_EQ(slow.received().find("200 OK"), std::string::npos);
}

TEST_F(HttpFrontEnd, IdleKeepAliveConnectionIsClosedAfterIdleTimeout) {
  Start({"--http-idle-timeout", "1"});
  Raw c(d.http_port);
  ASSERT_TRUE(c.connected());
  c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  c.ReadUntil([](const std::string& s) { return HasResponses(s, 1); });
  ASSERT_TRUE(HasResponses(c.received(), 1)) << c.received();
  c.ReadToClose(std::chrono::seconds(15));
  EXPECT_TRUE(c.closed());
}

// The connection cap answers one connection too many with 503 and the reason, and admits
// new connections again once others close.
TEST_F(HttpFrontEnd, ConnectionCapRefusesWithAReason) {
  Start({"--http-max-connections", "8"});
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(std::make_unique<Raw>(d.http_port));
    held.back()->Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    held.back()->ReadUntil([](const std::string& s) { return HasResponses(s, 1); });
    ASSERT_NE(held.back()->received().find("200 OK"), std::string::npos) << i;
  }
  Raw extra(d.http_port);
  extra.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string refused = extra.ReadToClose();
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too many open connections (max_connections 8)"), std::string::npos)
      << refused;
  held.pop_back();
  EXPECT_TRUE(WaitFor([&] {
    Raw again(d.http_port);
    again.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    return again.ReadToClose().find("200 OK") != std::string::npos;
  }));
}

// Defect 3: the header section is bounded (431), and the server lives on.
TEST_F(HttpFrontEnd, HeaderFloodIsRefusedWith431) {
  Start();
  Raw c(d.http_port);
  std::string req = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 2000; ++i)
    req += "X-Flood-" + std::to_string(i) + ": " + std::string(50, 'f') + "\r\n";
  req += "\r\n";
  c.Send(req);
  const std::string got = c.ReadToClose();
  EXPECT_NE(got.find("HTTP/1.1 431"), std::string::npos) << got.substr(0, 200);
  EXPECT_NE(got.find("larger than max_header_bytes (16384)"), std::string::npos);
  EXPECT_EQ(Http().Get("/healthz")->status, 200);
}

// Defect 10: a JSON body above 8 KB sent with curl -d's form content type is JSON; the
// body limit (413) names max_body_bytes.
TEST_F(HttpFrontEnd, BigJsonBodyWithFormContentTypeIsHandledAsJson) {
  Start();
  auto c = Http();
  const std::string body =
      R"({"domain":"rl","descriptors":[{"entries":[{"key":"remote_address","value":")" +
      std::string(10000, 'v') + R"("}]}]})";
  auto r = c.Post("/json", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find(R"("overallCode":"OK")"), std::string::npos) << r->body;
  r = c.Post("/json", std::string(70000, ' '), "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("larger than max_body_bytes (65536)"), std::string::npos) << r->body;
}

// Defect 8: five pipelined requests in one write get five answers, in order.
TEST_F(HttpFrontEnd, PipelinedRequestsAreAllAnsweredInOrder) {
  Start();
  Raw c(d.http_port);
  c.Send(
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /v1/check?domain=rl&key=path&value=%2Fx+y HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
      "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = c.ReadUntil([](const std::string& s) { return HasResponses(s, 5); });
  ASSERT_TRUE(HasResponses(got, 5)) << got;
  std::vector<std::string> status;
  for (std::size_t p = got.find("HTTP/1.1 "); p != std::string::npos;
       p = got.find("HTTP/1.1 ", p + 1)) {
    status.push_back(got.substr(p + 9, 3));
  }
  EXPECT_EQ(status, (std::vector<std::string>{"200", "404", "200", "400", "200"})) << got;
  EXPECT_NE(got.find("ok\n"), std::string::npos);
  EXPECT_LT(got.find("ok\n"), got.find("no such endpoint"));
  EXPECT_LT(got.find("no such endpoint"), got.find(R"("remaining":6)"));
  EXPECT_LT(got.find(R"("remaining":6)"), got.find("ready\n"));
}

// Defect 9: repeated key=/value= pairs are kept, in order, percent-decoded.
TEST_F(HttpFrontEnd, RepeatedQueryPairsAreKeptInOrder) {
  Start();
  auto c = Http();
  auto r = c.Get("/v1/check?domain=rl&key=a&value=1&key=b&value=1&key=b&value=2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find(R"("limited":true)"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("name":"a_b_b")"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(R"("remaining":4)"), std::string::npos) << r->body;
  // %2F and '+' decode to "/x y" (rule path="/x y").
  Raw raw(d.http_port);
  raw.Send("GET /v1/check?domain=rl&key=path&value=%2Fx+y HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = raw.ReadUntil([](const std::string& s) { return HasResponses(s, 1); });
  EXPECT_NE(got.find(R"("limit":7)"), std::string::npos) << got;
  r = c.Get("/v1/check?domain=rl&key=path&value=%2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("invalid percent-encoding"), std::string::npos) << r->body;
}

// Defect 11: the listen backlog is SOMAXCONN (or what --http-backlog says), not 5.
// `ss -ltn` shows a listening socket's backlog in its Send-Q column.
int ListenBacklog(int port) {
  const std::string cmd = "ss -Hltn 'sport = :" + std::to_string(port) + "' 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char line[512] = {};
  std::string out;
  while (std::fgets(line, sizeof line, f) != nullptr) out += line;
  ::pclose(f);
  char state[32];
  int recv_q = 0, send_q = 0;
  if (std::sscanf(out.c_str(), "%31s %d %d", state, &recv_q, &send_q) != 3) {
    ADD_FAILURE() << "cannot read the backlog from `" << cmd << "`: " << out;
    return -1;
  }
  return send_q;
}

TEST_F(HttpFrontEnd, ListenBacklogIsSomaxconnOrConfigured) {
  Start();
  const int somaxconn = std::stoi(ReadFile("/proc/sys/net/core/somaxconn"));
  EXPECT_EQ(ListenBacklog(d.http_port), std::min(somaxconn, SOMAXCONN));
  TempDir other;
  WriteFile(other.File("c.yaml"), kConfig);
  Sluiced s = StartSluiced(other.File("c.yaml"), other.File("log"), {"--http-backlog", "77"});
  ASSERT_GT(s.http_port, 0);
  EXPECT_EQ(ListenBacklog(s.http_port), 77);
}

// "Smaller things": 405 with Allow for a wrong method; a POST without a length gets 411
// and a reason.
TEST_F(HttpFrontEnd, WrongMethodAndMissingLengthGetReasons) {
  Start();
  auto c = Http();
  auto r = c.Delete("/v1/check?domain=rl&key=a&value=b");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, POST");
  EXPECT_NE(r->body.find("method DELETE not allowed on /v1/check"), std::string::npos) << r->body;
  r = c.Get("/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  Raw raw(d.http_port);
  raw.Send("POST /json HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = raw.ReadToClose();
  EXPECT_NE(got.find("HTTP/1.1 411"), std::string::npos) << got;
  EXPECT_NE(got.find("POST needs a Content-Length header"), std::string::npos) << got;
}

// Defect 14: invalid UTF-8 in a gRPC entry is INVALID_ARGUMENT with a reason, counted.
TEST_F(HttpFrontEnd, GrpcInvalidUtf8IsInvalidArgumentAndCounted) {
  Start();
  auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(d.grpc_port), grpc::InsecureChannelCredentials()));
  pb::RateLimitRequest req;
  req.set_domain("rl");
  auto* e = req.add_descriptors()->add_entries();
  e->set_key("remote_address");
  e->set_value(std::string("\xff\xfe bad", 6));
  pb::RateLimitResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status s = stub->ShouldRateLimit(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "descriptors[0].entries[0].value is not valid UTF-8");
  EXPECT_NE(Metrics().find(R"(sluiced_requests_total{api="grpc",outcome="invalid"} 1)"),
            std::string::npos)
      << Metrics();
  // Valid multi-byte UTF-8 passes.
  e->set_value("\xc3\xa9t\xc3\xa9");
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  resp.Clear();
  EXPECT_TRUE(stub->ShouldRateLimit(&ctx2, req, &resp).ok());
}

health::HealthCheckResponse::ServingStatus GrpcHealth(int port) {
  auto stub = health::Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  health::HealthCheckRequest req;
  health::HealthCheckResponse resp;
  if (!stub->Check(&ctx, req, &resp).ok()) return health::HealthCheckResponse::UNKNOWN;
  return resp.status();
}

int HttpStatus(httplib::Client& c, const std::string& path) {
  auto r = c.Get(path);
  return r ? r->status : 0;
}

// SIGTERM with a drain period: /readyz 503 and gRPC health NOT_SERVING while requests
// are still served; a second SIGTERM ends the drain early.
TEST_F(HttpFrontEnd, SigtermDrainsThenStops) {
  Start({"--drain-period", "600"});
  auto c = Http();
  EXPECT_EQ(GrpcHealth(d.grpc_port), health::HealthCheckResponse::SERVING);
  EXPECT_EQ(HttpStatus(c, "/readyz"), 200);
  d.process->Signal(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return HttpStatus(c, "/readyz") == 503; })) << d.LogText();
  EXPECT_EQ(HttpStatus(c, "/v1/check?domain=rl&key=remote_address&value=draining"), 200);
  EXPECT_EQ(GrpcHealth(d.grpc_port), health::HealthCheckResponse::NOT_SERVING);
  EXPECT_TRUE(d.process->running());
  EXPECT_NE(d.LogText().find("event=draining period_ms=600000"), std::string::npos);
  d.process->Signal(SIGTERM);
  EXPECT_EQ(d.process->Wait(std::chrono::seconds(15)), 0) << d.LogText();
  EXPECT_NE(d.LogText().find("event=drain_cut_short"), std::string::npos);
  EXPECT_NE(d.LogText().find("event=stopped"), std::string::npos);
}

TEST_F(HttpFrontEnd, DrainPeriodEndsByItself) {
  Start({"--drain-period", "0.2"});
  d.process->Signal(SIGTERM);
  EXPECT_EQ(d.process->Wait(std::chrono::seconds(15)), 0) << d.LogText();
  EXPECT_NE(d.LogText().find("event=draining"), std::string::npos);
  EXPECT_EQ(d.LogText().find("event=drain_cut_short"), std::string::npos);
  EXPECT_NE(d.LogText().find("event=stopped"), std::string::npos);
}

// Defect 4: the Redis password never reaches the log.
TEST_F(HttpFrontEnd, RedisPasswordIsMaskedInTheLog) {
  auto redis = RedisServer::Start({.password = "s3cret-pw"});
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  Start({"--redis", (*redis)->Url()});
  const std::string log = d.LogText();
  EXPECT_EQ(log.find("s3cret-pw"), std::string::npos) << log;
  EXPECT_NE(log.find("store=redis://:***@127.0.0.1:"), std::string::npos) << log;
}

// Redis going away: /readyz says not ready (unless --ready-while-degraded), decisions
// follow the rule's failure mode, and readiness comes back with Redis.
TEST_F(HttpFrontEnd, ReadyzFollowsTheStore) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  Start({"--redis", (*redis)->Url()});
  TempDir other;
  WriteFile(other.File("c.yaml"), kConfig);
  Sluiced lenient = StartSluiced(other.File("c.yaml"), other.File("log"),
                                 {"--redis", (*redis)->Url(), "--ready-while-degraded"});
  ASSERT_GT(lenient.http_port, 0);
  httplib::Client l("127.0.0.1", lenient.http_port);
  l.set_read_timeout(10, 0);
  auto c = Http();
  EXPECT_EQ(HttpStatus(c, "/readyz"), 200);
  (*redis)->Stop();
  ASSERT_TRUE(WaitFor([&] { return HttpStatus(c, "/readyz") == 503; }, std::chrono::seconds(20)))
      << d.LogText();
  EXPECT_EQ(GrpcHealth(d.grpc_port), health::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HttpStatus(c, "/healthz"), 200);
  // fail_open: allowed while Redis is down.
  EXPECT_EQ(HttpStatus(c, "/v1/check?domain=rl&key=open&value=x"), 200);
  EXPECT_NE(d.LogText().find("event=store_unreachable"), std::string::npos);
  EXPECT_EQ(HttpStatus(l, "/readyz"), 200);
  ASSERT_TRUE((*redis)->Restart().ok());
  EXPECT_TRUE(WaitFor([&] { return HttpStatus(c, "/readyz") == 200; }, std::chrono::seconds(30)))
      << d.LogText();
}

// sluiced starts while Redis is down: not ready, each rule's failure mode decides, and
// it becomes ready once Redis is up (reconnecting in the background).
// DISABLED_ until client-m2 (RedisStoreOptions::require_connection) is on main: without it
// an unreachable Redis is still a start error. Enable by dropping the prefix.
TEST_F(HttpFrontEnd, StartsDegradedWhileRedisIsDown) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  (*redis)->Stop();  // the port is refused until Restart
  Start({"--redis", (*redis)->Url()});
  EXPECT_NE(d.LogText().find("store_reachable=false"), std::string::npos) << d.LogText();
  auto c = Http();
  EXPECT_EQ(HttpStatus(c, "/readyz"), 503);
  EXPECT_EQ(HttpStatus(c, "/healthz"), 200);
  EXPECT_EQ(GrpcHealth(d.grpc_port), health::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HttpStatus(c, "/v1/check?domain=rl&key=open&value=x"), 200);
  EXPECT_EQ(HttpStatus(c, "/v1/check?domain=rl&key=closed&value=x"), 429);
  ASSERT_TRUE((*redis)->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return HttpStatus(c, "/readyz") == 200; }, std::chrono::seconds(30)))
      << d.LogText();
  EXPECT_EQ(GrpcHealth(d.grpc_port), health::HealthCheckResponse::SERVING);
  EXPECT_EQ(HttpStatus(c, "/v1/check?domain=rl&key=closed&value=x"), 200);
}

}  // namespace
}  // namespace sluice::testing
