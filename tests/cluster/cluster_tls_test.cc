// rediss-cluster:// against a real TLS cluster (3 primaries, `tls-cluster yes`,
// `tls-replication yes`, certificates made by openssl in the test): decisions reach
// every primary over TLS (the router follows the TLS ports the cluster announces), a
// certificate the client does not trust is a clear error within connect_timeout, and
// `sluice check` works over it (and exits 3 on the bad certificate).
#include <gtest/gtest.h>

#include <chrono>

#include "cli_runner.h"
#include "redis_cluster.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
// Scheduling slack on a loaded 2-core machine.
constexpr auto kMargin = milliseconds(1500);

class ClusterTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto certs = TestCerts::Make();
    if (!certs.ok()) {
      error_ = certs.status().ToString();
      return;
    }
    certs_ = certs->release();
    RedisClusterOptions o;
    o.replicas_per_primary = 0;  // three TLS nodes keep the suite short
    o.tls = certs_;
    auto cluster = RedisCluster::Start(o);
    if (!cluster.ok()) {
      error_ = cluster.status().ToString();
      return;
    }
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete certs_;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << error_; }

  static TestCerts* certs_;
  static RedisCluster* cluster_;
  static std::string error_;
};
TestCerts* ClusterTls::certs_ = nullptr;
RedisCluster* ClusterTls::cluster_ = nullptr;
std::string ClusterTls::error_;

Result<std::shared_ptr<RedisStore>> Open(const std::string& url, Micros connect_timeout) {
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout = connect_timeout;
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  return RedisStore::Create(std::move(o));
}

TEST_F(ClusterTls, DecidesOnEveryPrimaryOverTls) {
  ASSERT_TRUE(cluster_->FlushAll().ok());
  // One TLS seed is enough: the others are found in CLUSTER SHARDS' tls-port.
  const std::string seed_only =
      "rediss-cluster://127.0.0.1:" + std::to_string(cluster_->tls_port(1)) +
      "?tls_ca=" + certs_->Path("ca.crt");
  for (const std::string& url : {cluster_->TlsUrl(), seed_only}) {
    auto store = Open(url, 5'000'000);
    ASSERT_TRUE(store.ok()) << url << ": " << store.status().ToString();
    LimiterOptions lo;
    lo.policies = {Policy::FixedWindow("fw", 2, std::chrono::hours(1))};
    lo.store = *store;
    lo.deny_cache = false;
    auto l = Limiter::Create(std::move(lo));
    ASSERT_TRUE(l.ok());
    for (int i = 0; i < 60; ++i) {
      const std::string key = std::to_string(url.size()) + "k" + std::to_string(i);
      for (int n = 0; n < 2; ++n) {
        auto d = (*l)->Acquire(key);
        ASSERT_TRUE(d.ok()) << d.status().ToString();
        EXPECT_TRUE(d->allowed);
        EXPECT_EQ(d->source, DecisionSource::kStore);
      }
      auto third = (*l)->Acquire(key);
      ASSERT_TRUE(third.ok());
      EXPECT_FALSE(third->allowed);
      EXPECT_EQ(third->source, DecisionSource::kStore);
    }
  }
  // Every primary holds some of the keys: the calls reached all of them over TLS.
  auto primaries = cluster_->Primaries();
  ASSERT_TRUE(primaries.ok());
  ASSERT_EQ(primaries->size(), 3u);
  for (std::size_t p : *primaries) {
    auto n = cluster_->Command(p, {"DBSIZE"});
    ASSERT_TRUE(n.ok());
    EXPECT_GT(n->integer, 0) << "primary " << p;
  }
}

TEST_F(ClusterTls, AnUntrustedCertificateIsAClearErrorWithinConnectTimeout) {
  const std::string url = "rediss-cluster://127.0.0.1:" + std::to_string(cluster_->tls_port(0)) +
                          "?tls_ca=" + certs_->Path("other.crt");
  const auto start = steady_clock::now();
  auto store = Open(url, 1'000'000);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find("certificate verify failed"), std::string::npos)
      << store.status().ToString();
  EXPECT_LT(steady_clock::now() - start, milliseconds(1000) + kMargin);
  // A TLS URL to the plain ports fails too, naming the handshake.
  auto plain = Open("rediss-cluster://127.0.0.1:" + std::to_string(cluster_->node(0).port()) +
                        "?tls_ca=" + certs_->Path("ca.crt"),
                    1'000'000);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("TLS handshake"), std::string::npos)
      << plain.status().ToString();
}

TEST_F(ClusterTls, SluiceCheckWorksOverTlsAndExits3OnABadCertificate) {
  auto check = [](const std::string& url) {
    return RunCli(SLUICE_CLI_BIN, {"check", "--key", "cli:tls", "--rate", "5/min", "--redis", url,
                                   "--connect-timeout", "1s"});
  };
  ASSERT_TRUE(cluster_->FlushAll().ok());
  CliOutcome ok = check(cluster_->TlsUrl());
  EXPECT_EQ(ok.rc, 0) << ok.Describe();
  EXPECT_NE(ok.out.find("allowed: 4 of 5 left"), std::string::npos) << ok.Describe();
  CliOutcome bad = check("rediss-cluster://127.0.0.1:" + std::to_string(cluster_->tls_port(0)) +
                         "?tls_ca=" + certs_->Path("other.crt"));
  EXPECT_EQ(bad.rc, 3) << bad.Describe();
  EXPECT_NE(bad.err.find("certificate verify failed"), std::string::npos) << bad.Describe();
  EXPECT_LT(bad.took, milliseconds(1000) + kMargin);
}

// The same cluster serves plain clients on its plain ports (it announces the port that
// matches the connection): `sluice check` over redis-cluster://, and `sluice bench` over
// both redis-cluster:// and rediss-cluster://, decide.
TEST_F(ClusterTls, SluiceCheckAndBenchOverPlainAndTlsClusterUrls) {
  ASSERT_TRUE(cluster_->FlushAll().ok());
  CliOutcome ok = RunCli(SLUICE_CLI_BIN, {"check", "--key", "cli:plain", "--rate", "5/min",
                                          "--redis", cluster_->Url(), "--connect-timeout", "2s"});
  EXPECT_EQ(ok.rc, 0) << ok.Describe();
  EXPECT_NE(ok.out.find("allowed: 4 of 5 left"), std::string::npos) << ok.Describe();
  for (const std::string& url : {cluster_->Url(), cluster_->TlsUrl()}) {
    CliOutcome b = RunBench(SLUICE_CLI_BIN, url);
    EXPECT_EQ(BenchProblems(b), "") << url << ": " << b.Describe();
  }
  // The bench keys landed on more than one primary.
  int primaries_with_keys = 0;
  for (std::size_t i = 0; i < cluster_->size(); ++i) {
    auto n = cluster_->Command(i, {"DBSIZE"});
    ASSERT_TRUE(n.ok());
    primaries_with_keys += n->integer > 0;
  }
  EXPECT_GE(primaries_with_keys, 2);
}

}  // namespace
}  // namespace sluice::testing
