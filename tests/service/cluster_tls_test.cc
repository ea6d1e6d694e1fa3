// sluiced on a TLS Redis Cluster (rediss-cluster://, a real 3-node cluster with
// `tls-cluster yes` started by the test, certificates made by openssl): two processes
// share one limit, whatever primary its key lives on.
#include <gtest/gtest.h>
#include <httplib.h>

#include "process.h"
#include "redis_cluster.h"
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
