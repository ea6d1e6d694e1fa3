// Internal: Redis connection URLs.
#pragma once

#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::redis {

// Where and how to connect. Parsed from
//   redis://[[user]:password@]host[:port][/db]      (port 6379, db 0 by default)
//   unix:///path/to/socket[?db=N]
struct Url {
  bool unix_socket = false;
  std::string host;  // TCP host name or address (brackets of an IPv6 literal removed)
  int port = 6379;
  std::string path;  // unix socket path
  std::string user;  // ACL user; empty: the default user
  std::string password;
  int db = 0;

  // "redis://host:port/db" or "unix:///path", without the password (for messages).
  std::string Describe() const;
};

// Parses `text`. Errors are InvalidArgument and quote the URL (password masked).
Result<Url> ParseUrl(std::string_view text);

}  // namespace sluice::redis
