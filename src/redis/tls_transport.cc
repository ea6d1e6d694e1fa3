#include "redis/tls_transport.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::redis {
namespace {

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown error" : out;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

class TlsTransport final : public Transport {
 public:
  TlsTransport(int fd, SSL_CTX* ctx, SSL* ssl) : Transport(fd), ctx_(ctx), ssl_(ssl) {}
  ~TlsTransport() override {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }

  IoResult Read(char* buf, std::size_t n, std::size_t* got) override {
    ERR_clear_error();
    const int r = SSL_read(ssl_, buf, static_cast<int>(n));
    if (r > 0) {
      *got = static_cast<std::size_t>(r);
      read_wants_write_ = false;
      return IoResult::kOk;
    }
    return Fail(r, &read_wants_write_);
  }

  IoResult Write(const char* buf, std::size_t n, std::size_t* wrote) override {
    if (n == 0) {
      *wrote = 0;
      return IoResult::kOk;
    }
    ERR_clear_error();
    const int r = SSL_write(ssl_, buf, static_cast<int>(std::min<std::size_t>(n, 1 << 30)));
    if (r > 0) {
      *wrote = static_cast<std::size_t>(r);
      return IoResult::kOk;
    }
    bool ignored;
    return Fail(r, &ignored);
  }

  bool HasBuffered() const override { return SSL_pending(ssl_) > 0; }

  short PollEvents(bool want_write) const override {
    return static_cast<short>(POLLIN | (want_write || read_wants_write_ ? POLLOUT : 0));
  }

 private:
  IoResult Fail(int r, bool* wants_write) {
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
        *wants_write = false;
        return IoResult::kWouldBlock;
      case SSL_ERROR_WANT_WRITE:
        *wants_write = true;
        return IoResult::kWouldBlock;
      case SSL_ERROR_ZERO_RETURN:
        return IoResult::kClosed;
      case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
          if (errno == 0 || errno == ECONNRESET || r == 0) return IoResult::kClosed;
          error_ = std::string("TLS I/O failed: ") + strerror(errno);
          return IoResult::kError;
        }
        [[fallthrough]];
      default:
        error_ = "TLS error: " + OpenSslErrors();
        return IoResult::kError;
    }
  }

  SSL_CTX* ctx_;
  SSL* ssl_;
  bool read_wants_write_ = false;
};

}  // namespace

Result<std::unique_ptr<Transport>> StartTls(std::unique_ptr<Transport> plain, const Url& u,
                                            Deadline deadline, int cancel_fd) {
  const TlsOptions& o = u.tls;
  const std::string where = u.Describe();
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return Status::Internal("SSL_CTX_new: " + OpenSslErrors());
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx_guard(ctx, SSL_CTX_free);
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!o.insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    const int ok = o.ca_file.empty()
                       ? SSL_CTX_set_default_verify_paths(ctx)
                       : SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr);
    if (ok != 1) {
      return Status::InvalidArgument("cannot read tls_ca '" + o.ca_file + "': " + OpenSslErrors());
    }
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
      return Status::InvalidArgument("cannot read tls_cert '" + o.cert_file +
                                     "': " + OpenSslErrors());
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return Status::InvalidArgument("cannot read tls_key '" + o.key_file +
                                     "': " + OpenSslErrors());
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return Status::InvalidArgument("tls_key '" + o.key_file + "' does not match tls_cert '" +
                                     o.cert_file + "'");
    }
  }
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return Status::Internal("SSL_new: " + OpenSslErrors());
  std::unique_ptr<SSL, void (*)(SSL*)> ssl_guard(ssl, SSL_free);
  const int fd = plain->fd();
  SSL_set_fd(ssl, fd);
  const std::string name = o.sni.empty() ? u.host : o.sni;
  const bool ip = IsIpLiteral(name);
  if (!ip) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (!o.insecure) {
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
    } else {
      SSL_set1_host(ssl, name.c_str());
    }
  }
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ssl);
    if (r == 1) break;
    const int err = SSL_get_error(ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      if (!PollUntil(fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, cancel_fd)) {
        return Status::Unavailable("TLS handshake with " + where +
                                   " timed out (is it a TLS port?)");
      }
      continue;
    }
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      return Status::Unavailable(
          "TLS handshake with " + where + " failed: certificate verify " +
          "failed: " + X509_verify_cert_error_string(verify) +
          (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH
               ? " (the certificate is not for '" + name + "'; set tls_sni, or tls_insecure=1)"
               : ""));
    }
    if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      return Status::Unavailable("TLS handshake with " + where +
                                 " failed: the peer closed the connection (is it a TLS port?)");
    }
    return Status::Unavailable("TLS handshake with " + where + " failed: " + OpenSslErrors() +
                               " (is it a TLS port?)");
  }
  const int owned = plain->Release();
  ssl_guard.release();
  ctx_guard.release();
  return std::unique_ptr<Transport>(new TlsTransport(owned, ctx, ssl));
}

}  // namespace sluice::redis
