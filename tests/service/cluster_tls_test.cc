// sluiced over TLS (certificates made by openssl in the test): on one TLS redis-server
// (rediss://), and on a real 3-node TLS cluster (rediss-cluster://, `tls-cluster yes`)
// where two processes share one limit, whatever primary its key lives on.
#include <gtest/gtest.h>
#include <httplib.h>

#include "process.h"
#include "redis_cluster.h"
#include "redis_server.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

const char* kConfig = R"(sluiced:
  reload_poll: 0
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window, failure_mode: fail_closed}
)";

int Check(int port, const std::string& value) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/check?domain=shared&key=user&value=" + value);
  return r ? r->status : 0;
}

TEST(SluicedTls, DecidesOverRediss) {
  auto certs = TestCerts::Make();
  ASSERT_TRUE(certs.ok()) << certs.status().ToString();
  auto tls_port = FreeLoopbackPort();
  ASSERT_TRUE(tls_port.ok());
  RedisServerOptions so;
  so.args = (*certs)->ServerArgs(*tls_port);
  auto server = RedisServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  const std::string url =
      "rediss://127.0.0.1:" + std::to_string(*tls_port) + "?tls_ca=" + (*certs)->Path("ca.crt");
  Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("a.log"), {"--redis", url});
  ASSERT_GT(a.http_port, 0) << a.LogText();
  int allowed = 0;
  for (int i = 0; i < 12; ++i) allowed += Check(a.http_port, "u1") == 200;
  EXPECT_EQ(allowed, 10);
  auto keys = (*server)->Command({"DBSIZE"});  // the plain port: the fixture's view
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->integer, 1);
}

TEST(SluicedClusterTls, TwoProcessesShareOneLimitOverRedissCluster) {
  auto certs = TestCerts::Make();
  ASSERT_TRUE(certs.ok()) << certs.status().ToString();
  RedisClusterOptions co;
  co.replicas_per_primary = 0;
  co.tls = certs->get();
  auto cluster = RedisCluster::Start(co);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  TempDir dir;
  WriteFile(dir.File("sluiced.yaml"), kConfig);
  const std::string url = (*cluster)->TlsUrl();
  Sluiced a = StartSluiced(dir.File("sluiced.yaml"), dir.File("a.log"), {"--redis", url});
  Sluiced b = StartSluiced(dir.File("sluiced.yaml"), dir.File("b.log"), {"--redis", url});
  ASSERT_GT(a.http_port, 0) << a.LogText();
  ASSERT_GT(b.http_port, 0) << b.LogText();
  // Values whose keys land on different primaries: each one's limit is shared.
  for (const std::string value : {"u1", "u2", "u3", "u4", "u5", "u6"}) {
    int allowed = 0;
    for (int i = 0; i < 14; ++i) allowed += Check(i % 2 ? a.http_port : b.http_port, value) == 200;
    EXPECT_EQ(allowed, 10) << value;
  }
  // The keys are spread over the primaries (reached over TLS).
  int primaries_with_keys = 0;
  for (std::size_t i = 0; i < (*cluster)->size(); ++i) {
    auto n = (*cluster)->Command(i, {"DBSIZE"});
    ASSERT_TRUE(n.ok());
    primaries_with_keys += n->integer > 0;
  }
  EXPECT_GE(primaries_with_keys, 2);
}

}  // namespace
}  // namespace sluice::testing
