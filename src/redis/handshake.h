// Internal: connecting to one Redis server and preparing the connection: AUTH, PING,
// SELECT and (optionally) SCRIPT LOAD, one round trip each.
//
// The whole handshake — connect and every step — is bounded by ONE deadline
// (connect_timeout from its start): a peer that trickles a byte at a time cannot
// stretch it, and no reply may exceed kMaxHandshakeReplyBytes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "redis/deadline.h"
#include "redis/reply.h"
#include "redis/transport.h"
#include "redis/url.h"
#include "sluice/status.h"

namespace sluice::redis {

// Replies during the handshake are a few bytes (+OK, +PONG, a SHA).
inline constexpr std::size_t kMaxHandshakeReplyBytes = 64 * 1024;

struct HandshakeOptions {
  Url url;  // where (first endpoint or unix socket), user, password, db
  // Bound on the whole handshake.
  Micros connect_timeout = 1'000'000;
  // Loaded with SCRIPT LOAD, in order; may be empty (scripts loaded on NOSCRIPT).
  std::vector<std::string> scripts;
  // Asks whether the server has sluice's native module (SLUICE.VERSION answers its
  // layout version: module/wire.h). Any other answer, an error included, is "no".
  bool probe_module = false;
};

// What the handshake learned about the server.
struct HandshakeInfo {
  bool module = false;  // SLUICE.VERSION answered this client's layout version
};

// Connects and prepares a connection. The error names what failed: refused, timed
// out, wrong password (InvalidArgument), a bad database (InvalidArgument), a peer that
// does not speak Redis, a SCRIPT LOAD the server refused.
// `cancel_fd` (if >= 0) aborts every wait as soon as it is readable.
// `info` (if not null) gets what the handshake learned.
Result<std::unique_ptr<Transport>> ConnectAndHandshake(const HandshakeOptions& options,
                                                       int cancel_fd = -1,
                                                       HandshakeInfo* info = nullptr);

// Blocks SIGPIPE for the calling thread for good (an I/O thread that writes TLS).
void BlockSigpipeInThisThread();

// One blocking round trip on `t` by `deadline`: writes `wire` (one command), reads
// exactly one reply (at most `max_bytes` of it). `step` names the command in errors.
Result<ReplyPtr> RoundTrip(Transport& t, std::string_view wire, Deadline deadline,
                           const std::string& where, const char* step,
                           std::size_t max_bytes = kMaxHandshakeReplyBytes, int cancel_fd = -1);

}  // namespace sluice::redis
