// `sluice check` over rediss:// against a real TLS redis-server (certificates made by
// openssl in the test): check and bench decide; TLS to a plain port, plain to a TLS port, a cluster
// seed that is not a cluster node, an expired and a mismatched server certificate each
// exit 3 with a message naming what is wrong, within --connect-timeout.
#include <gtest/gtest.h>

#include <chrono>

#include "cli_runner.h"
#include "redis_server.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
constexpr auto kMargin = milliseconds(1500);  // scheduling slack on a loaded machine

struct TlsServer {
  std::unique_ptr<RedisServer> server;
  int tls_port = 0;
};

TlsServer Start(const TestCerts& certs, const std::string& cert) {
  TlsServer t;
  auto port = FreeLoopbackPort();
  EXPECT_TRUE(port.ok());
  if (!port.ok()) return t;
  t.tls_port = *port;
  RedisServerOptions o;
  o.args = certs.ServerArgs(t.tls_port, cert);
  auto s = RedisServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) t.server = std::move(*s);
  return t;
}

CliOutcome Check(const std::string& url) {
  return RunCli(SLUICE_CLI_BIN, {"check", "--key", "user:1", "--rate", "5/min", "--redis", url,
                                 "--connect-timeout", "1s"});
}

TEST(CliTls, ChecksOverRedissAndExits3OnBadInput) {
  auto certs = TestCerts::Make();
  ASSERT_TRUE(certs.ok()) << certs.status().ToString();
  const std::string ca = "?tls_ca=" + (*certs)->Path("ca.crt");

  TlsServer good = Start(**certs, "server");
  ASSERT_NE(good.server, nullptr);
  CliOutcome ok = Check("rediss://127.0.0.1:" + std::to_string(good.tls_port) + ca);
  EXPECT_EQ(ok.rc, 0) << ok.Describe();
  EXPECT_NE(ok.out.find("allowed: 4 of 5 left"), std::string::npos) << ok.Describe();
  // `sluice bench` over rediss:// makes its decisions too.
  CliOutcome bench =
      RunBench(SLUICE_CLI_BIN, "rediss://127.0.0.1:" + std::to_string(good.tls_port) + ca);
  EXPECT_EQ(BenchProblems(bench), "") << bench.Describe();

  // TLS to the server's plain port, plain to its TLS port, and a cluster URL whose seed
  // is a plain server: each exits 3 naming the problem, within --connect-timeout.
  const std::string plain_port = std::to_string(good.server->port());
  const struct {
    std::string url, expect;
  } wrong[] = {
      {"rediss://127.0.0.1:" + plain_port + ca, "TLS handshake"},
      {"redis://127.0.0.1:" + std::to_string(good.tls_port), "PING"},
      {"redis-cluster://127.0.0.1:" + plain_port, "is not a Redis Cluster node"},
  };
  for (const auto& w : wrong) {
    CliOutcome o = Check(w.url);
    EXPECT_EQ(o.rc, 3) << w.url << ": " << o.Describe();
    EXPECT_NE(o.err.find(w.expect), std::string::npos) << w.url << ": " << o.Describe();
    EXPECT_LT(o.took, milliseconds(1000) + kMargin) << w.url;
  }

  TlsServer expired = Start(**certs, "expired");
  ASSERT_NE(expired.server, nullptr);
  CliOutcome e = Check("rediss://127.0.0.1:" + std::to_string(expired.tls_port) + ca);
  EXPECT_EQ(e.rc, 3) << e.Describe();
  EXPECT_NE(e.err.find("certificate has expired"), std::string::npos) << e.Describe();
  EXPECT_LT(e.took, milliseconds(1000) + kMargin);

  TlsServer mismatch = Start(**certs, "mismatch");
  ASSERT_NE(mismatch.server, nullptr);
  CliOutcome m = Check("rediss://127.0.0.1:" + std::to_string(mismatch.tls_port) + ca);
  EXPECT_EQ(m.rc, 3) << m.Describe();
  EXPECT_NE(m.err.find("not for '127.0.0.1'"), std::string::npos) << m.Describe();
  EXPECT_LT(m.took, milliseconds(1000) + kMargin);
}

}  // namespace
}  // namespace sluice::testing
