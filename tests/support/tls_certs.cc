#include "tls_certs.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sluice::testing {

Result<std::unique_ptr<TestCerts>> TestCerts::Make() {
  std::unique_ptr<TestCerts> c(new TestCerts());
  char tmpl[] = "/tmp/sluice-tls-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal(std::string("mkdtemp: ") + strerror(errno));
  c->dir_ = tmpl;
  const std::string d = c->dir_;
  std::ofstream(c->Path("server.ext")) << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  std::ofstream(c->Path("mismatch.ext")) << "subjectAltName=DNS:wrong.example\n";
  std::ofstream(c->Path("client.ext")) << "extendedKeyUsage=clientAuth\n";
  // `openssl ca` is the way to give a certificate past dates (x509 -req only has -days
  // from now in OpenSSL 3.0); it needs a minimal CA configuration and database.
  std::ofstream(c->Path("index.txt")) << "";
  std::ofstream(c->Path("serial")) << "1000\n";
  std::ofstream(c->Path("ca.cnf"))
      << "[ca]\ndefault_ca=d\n[d]\ndatabase=" << d << "/index.txt\nnew_certs_dir=" << d
      << "\nserial=" << d << "/serial\npolicy=p\ndefault_md=sha256\n"
      << "unique_subject=no\n[p]\ncommonName=supplied\n";
  const std::string q = " >>" + d + "/openssl.log 2>&1";
  auto sign = [&](const std::string& name, const std::string& ext) {
    return "openssl x509 -req -in " + d + "/" + name + ".csr -CA " + d + "/ca.crt -CAkey " + d +
           "/ca.key -CAcreateserial -out " + d + "/" + name + ".crt -days 2 -extfile " + d + "/" +
           ext + ".ext" + q;
  };
  // P-256 keys: an RSA-2048 key takes 0.1-1 s of CPU to generate (five per test
  // process, seconds on a loaded machine), an EC key well under a millisecond.
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
  auto request = [&](const std::string& name, const std::string& cn) {
    return "openssl req" + ec + " -nodes -keyout " + d + "/" + name + ".key -out " + d + "/" +
           name + ".csr -subj /CN=" + cn + q;
  };
  const std::string cmds[] = {
      "openssl req -x509" + ec + " -nodes -keyout " + d + "/ca.key -out " + d +
          "/ca.crt -days 2 -subj /CN=sluice-test-ca" + q,
      "openssl req -x509" + ec + " -nodes -keyout " + d + "/other.key -out " + d +
          "/other.crt -days 2 -subj /CN=untrusted-ca" + q,
      request("server", "localhost"),
      sign("server", "server"),
      "openssl ca -batch -notext -config " + d + "/ca.cnf -cert " + d + "/ca.crt -keyfile " + d +
          "/ca.key -in " + d + "/server.csr -out " + d +
          "/expired.crt -startdate 20200101000000Z -enddate 20200102000000Z -extfile " + d +
          "/server.ext" + q,
      request("mismatch", "wrong.example"),
      sign("mismatch", "mismatch"),
      request("client", "sluice-client"),
      sign("client", "client"),
  };
  for (const std::string& cmd : cmds) {
    if (std::system(cmd.c_str()) != 0) {
      std::string log;
      std::ifstream in(c->Path("openssl.log"));
      log.assign(std::istreambuf_iterator<char>(in), {});
      return Status::Internal("failed: " + cmd + " (is the openssl command installed?) " + log);
    }
  }
  return c;
}

TestCerts::~TestCerts() {
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::vector<std::string> TestCerts::ServerArgs(int tls_port, const std::string& cert,
                                               bool require_client_cert) const {
  // expired.crt carries server.key's public key.
  const std::string key = cert == "expired" ? "server" : cert;
  return {"--tls-port",         std::to_string(tls_port),
          "--tls-cert-file",    Path(cert + ".crt"),
          "--tls-key-file",     Path(key + ".key"),
          "--tls-ca-cert-file", Path("ca.crt"),
          "--tls-auth-clients", require_client_cert ? "yes" : "no"};
}

}  // namespace sluice::testing
