// rediss:// against a TLS redis-server whose certificates the test generates with the
// `openssl` command (CA, server certificate for localhost/127.0.0.1, client
// certificate, and a second CA nobody trusts). The server also listens on a plain
// port, which gives "plain to a TLS port" and "TLS to a plain port" for free.
#include <gtest/gtest.h>

#include <chrono>

#include "process.h"
#include "redis_server.h"
#include "sluice/policy.h"
#include "sluice/redis_store.h"
#include "tls_certs.h"

namespace sluice::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
constexpr auto kMargin = milliseconds(1000);

// Certificates in a temporary directory, made by the openssl command (tls_certs.h).
struct Certs {
  std::unique_ptr<TestCerts> certs;
  bool ok = false;
  std::string Path(const std::string& f) const { return certs->Path(f); }

  Certs() {
    auto c = TestCerts::Make();
    if (!c.ok()) {
      ADD_FAILURE() << c.status().ToString();
      return;
    }
    certs = std::move(*c);
    ok = true;
  }
};

struct TlsRedis {
  std::unique_ptr<RedisServer> server;
  int tls_port = 0;
};

TlsRedis StartTlsRedis(const Certs& c, bool require_client_cert,
                       const std::string& cert = "server") {
  TlsRedis t;
  t.tls_port = FreePort();
  RedisServerOptions o;
  o.args = c.certs->ServerArgs(t.tls_port, cert, require_client_cert);
  auto s = RedisServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (s.ok()) t.server = std::move(*s);
  return t;
}

Status CreateAndDecide(const std::string& url, Micros connect_timeout = 5'000'000) {
  RedisStoreOptions o;
  o.url = url;
  o.connect_timeout = connect_timeout;
  o.call_timeout = 500'000;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(o);
  if (!store.ok()) return store.status();
  static const Policy p = Policy::FixedWindow("api", 10, std::chrono::seconds(60));
  StoreCheck check{.policy = &p, .key = "sluice:{tls}:api", .cost = 1};
  Decision d;
  Status s = (*store)->Run({.checks = std::span<const StoreCheck>(&check, 1), .now = 0},
                           std::span<Decision>(&d, 1));
  if (s.ok() && !d.allowed) return Status::Internal("denied");
  return s;
}

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new Certs();
    if (certs_->ok) redis_ = new TlsRedis(StartTlsRedis(*certs_, false));
  }
  static void TearDownTestSuite() {
    delete redis_;
    delete certs_;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok);
    ASSERT_NE(redis_->server, nullptr);
  }
  std::string TlsUrl(const std::string& host, const std::string& query) const {
    return "rediss://" + host + ":" + std::to_string(redis_->tls_port) + "?" + query;
  }
  static Certs* certs_;
  static TlsRedis* redis_;
};
Certs* Tls::certs_ = nullptr;
TlsRedis* Tls::redis_ = nullptr;

TEST_F(Tls, DecidesOverTlsWithTheHostNameOrTheAddressVerified) {
  const std::string ca = "tls_ca=" + certs_->Path("ca.crt");
  Status s = CreateAndDecide(TlsUrl("127.0.0.1", ca));
  EXPECT_TRUE(s.ok()) << "IP SAN: " << s.ToString();
  s = CreateAndDecide(TlsUrl("localhost", ca));
  EXPECT_TRUE(s.ok()) << "DNS SAN: " << s.ToString();
  EXPECT_TRUE(CreateAndDecide("rediss://localhost:" + std::to_string(redis_->tls_port) +
                              "?tls_ca=" + certs_->Path("ca.crt") + "&tls_sni=localhost")
                  .ok());
}

void ExpectUnavailableWithin(const std::string& url, const std::string& text) {
  const auto start = steady_clock::now();
  const Status s = CreateAndDecide(url, 1'000'000);
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable) << url << ": " << s.ToString();
  EXPECT_NE(s.message().find(text), std::string::npos) << url << ": " << s.ToString();
  EXPECT_LT(steady_clock::now() - start, milliseconds(1000) + kMargin) << url;
}

TEST_F(Tls, BadCertificatesAreClearErrorsWithinConnectTimeout) {
  // A CA that did not sign the server's certificate.
  ExpectUnavailableWithin(TlsUrl("127.0.0.1", "tls_ca=" + certs_->Path("other.crt")),
                          "certificate verify failed");
  // A name the certificate is not for.
  ExpectUnavailableWithin(
      TlsUrl("127.0.0.1", "tls_ca=" + certs_->Path("ca.crt") + "&tls_sni=redis.example.com"),
      "not for 'redis.example.com'");
  // ... which tls_insecure accepts (as some managed services need).
  EXPECT_TRUE(CreateAndDecide(
                  TlsUrl("127.0.0.1", "tls_ca=" + certs_->Path("other.crt") + "&tls_insecure=1"))
                  .ok());
}

// A server whose certificate has expired, and one whose (valid, trusted) certificate
// is for another name: each refused at the handshake, naming why.
TEST_F(Tls, ExpiredAndMismatchedServerCertificatesAreClearErrors) {
  TlsRedis expired = StartTlsRedis(*certs_, false, "expired");
  ASSERT_NE(expired.server, nullptr);
  ExpectUnavailableWithin("rediss://127.0.0.1:" + std::to_string(expired.tls_port) +
                              "?tls_ca=" + certs_->Path("ca.crt"),
                          "certificate has expired");
  TlsRedis mismatch = StartTlsRedis(*certs_, false, "mismatch");
  ASSERT_NE(mismatch.server, nullptr);
  const std::string url = "rediss://127.0.0.1:" + std::to_string(mismatch.tls_port) +
                          "?tls_ca=" + certs_->Path("ca.crt");
  ExpectUnavailableWithin(url, "not for '127.0.0.1'");
  // tls_sni with the name the certificate has is the fix (as for managed endpoints).
  EXPECT_TRUE(CreateAndDecide(url + "&tls_sni=wrong.example").ok());
}

TEST_F(Tls, TlsToAPlainPortAndPlainToATlsPortAreClearErrors) {
  ExpectUnavailableWithin("rediss://127.0.0.1:" + std::to_string(redis_->server->port()) +
                              "?tls_ca=" + certs_->Path("ca.crt"),
                          "TLS handshake");
  ExpectUnavailableWithin("redis://127.0.0.1:" + std::to_string(redis_->tls_port), "PING");
}

TEST_F(Tls, UnreadableFilesAreInvalidArguments) {
  const Status s = CreateAndDecide(TlsUrl("127.0.0.1", "tls_ca=/nonexistent/ca.pem"));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tls_ca '/nonexistent/ca.pem'"), std::string::npos) << s.ToString();
  const Status k = CreateAndDecide(TlsUrl(
      "127.0.0.1", "tls_ca=" + certs_->Path("ca.crt") + "&tls_cert=" + certs_->Path("client.crt") +
                       "&tls_key=" + certs_->Path("other.key")));
  EXPECT_EQ(k.code(), ErrorCode::kInvalidArgument) << k.ToString();
  EXPECT_NE(k.message().find("tls_key '" + certs_->Path("other.key") + "'"), std::string::npos)
      << k.ToString();
}

TEST(TlsMutual, AClientCertificateIsRequiredAndAccepted) {
  Certs certs;
  ASSERT_TRUE(certs.ok);
  TlsRedis redis = StartTlsRedis(certs, /*require_client_cert=*/true);
  ASSERT_NE(redis.server, nullptr);
  const std::string base =
      "rediss://127.0.0.1:" + std::to_string(redis.tls_port) + "?tls_ca=" + certs.Path("ca.crt");
  const Status without = CreateAndDecide(base);
  EXPECT_EQ(without.code(), ErrorCode::kUnavailable) << without.ToString();
  const Status with = CreateAndDecide(base + "&tls_cert=" + certs.Path("client.crt") +
                                      "&tls_key=" + certs.Path("client.key"));
  EXPECT_TRUE(with.ok()) << with.ToString();
}

}  // namespace
}  // namespace sluice::testing
