// Certificates for TLS tests, generated in a temporary directory by the `openssl`
// command (removed when the object is destroyed), all with P-256 keys:
//
//   ca.crt/.key          the test CA
//   other.crt/.key       a second, self-signed CA nobody trusts
//   server.crt/.key      signed by ca, for DNS:localhost and IP:127.0.0.1
//   expired.crt          signed by ca, same names and key as server, valid only in 2020
//   mismatch.crt/.key    signed by ca, valid, but only for DNS:wrong.example
//   client.crt/.key      signed by ca, extendedKeyUsage=clientAuth (mTLS)
//
//   auto certs = sluice::testing::TestCerts::Make();
//   ASSERT_TRUE(certs.ok()) << certs.status().ToString();  // no openssl: a failure
//   (*certs)->Path("ca.crt")
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::testing {

class TestCerts {
 public:
  static Result<std::unique_ptr<TestCerts>> Make();
  ~TestCerts();
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  std::string Path(const std::string& file) const { return dir_ + "/" + file; }
  // redis-server arguments that serve `cert` (e.g. "server") on `tls_port`, trusting
  // ca.crt for client certificates.
  std::vector<std::string> ServerArgs(int tls_port, const std::string& cert = "server",
                                      bool require_client_cert = false) const;

 private:
  TestCerts() = default;
  std::string dir_;
};

}  // namespace sluice::testing
