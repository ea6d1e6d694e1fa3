// Internal: TLS over a connected socket, with OpenSSL.
//
// Verification is on by default: the chain against tls_ca (or the system's CAs) and the
// host name (tls_sni, else the URL's host; an IP literal is matched against the
// certificate's IP addresses). tls_insecure skips both. A client certificate and key
// (mTLS) are sent when given. The handshake is non-blocking and bounded by the same
// deadline as the rest of the connect.
#pragma once

#include <memory>

#include "redis/deadline.h"
#include "redis/transport.h"
#include "redis/url.h"
#include "sluice/status.h"

namespace sluice::redis {

// Runs the TLS handshake on `plain` (already connected) by `deadline`. Errors:
// InvalidArgument for unreadable CA/certificate/key files or a key that does not
// match the certificate; Unavailable for a failed handshake, naming why (certificate
// verify failed: <reason>, a peer that does not speak TLS, timed out).
Result<std::unique_ptr<Transport>> StartTls(std::unique_ptr<Transport> plain, const Url& url,
                                            Deadline deadline, int cancel_fd = -1);

}  // namespace sluice::redis
