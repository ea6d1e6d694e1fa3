// Internal: Redis connection URLs, one form per topology.
//
//   redis://[[user]:password@]host[:port][/db][?db=N]           one server
//   rediss://[[user]:password@]host[:port][/db][?tls_...]        one server over TLS
//   unix:///path/to/socket[?db=N]
//   redis-cluster://[[user]:password@]host:port[,host:port...]   Cluster seed nodes
//   redis-sentinel://[[user]:password@]host:port[,host:port...]/MASTER[?db=N]
//   rediss-cluster://..., rediss-sentinel://...                  the same over TLS
//
// Port 6379 (26379 for sentinels) and db 0 by default. Query parameters (values
// %-decoded): db, tls_ca, tls_cert, tls_key, tls_sni, tls_insecure=1|0,
// sentinel_user, sentinel_password. '?', '@', ':' and ',' in a user name, password or
// parameter value must be %-escaped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::redis {

enum class Topology { kStandalone, kCluster, kSentinel };

// One TCP endpoint.
struct HostPort {
  std::string host;  // name or address (brackets of an IPv6 literal removed)
  int port = 6379;
  // "host:port" ("[::1]:port" for IPv6).
  std::string Describe() const;
};

struct TlsOptions {
  bool enabled = false;   // rediss*: the scheme decides, never a parameter
  std::string ca_file;    // PEM CA bundle; empty: the system's default CAs
  std::string cert_file;  // client certificate (mTLS), with key_file
  std::string key_file;
  std::string sni;        // server name sent and verified; empty: the host name
  bool insecure = false;  // skip certificate and host name verification
};

// Where and how to connect.
struct Url {
  Topology topology = Topology::kStandalone;
  bool unix_socket = false;
  // The first (for standalone: the only) endpoint; kept for the common case.
  std::string host;
  int port = 6379;
  // Every endpoint in the order given: the server, the cluster seed nodes or the
  // sentinels. Empty for a unix socket.
  std::vector<HostPort> endpoints;
  std::string path;  // unix socket path
  std::string user;  // ACL user; empty: the default user
  std::string password;
  int db = 0;
  std::string master_name;  // sentinel: the monitored primary's name
  std::string sentinel_user, sentinel_password;
  TlsOptions tls;
  // `module=off` (default on): never use sluice's native Redis module, even where the
  // server has it (docs/redis.md, "The native module").
  bool module = true;

  // The URL without passwords (for messages): "redis://host:port/db",
  // "rediss-sentinel://h1:26379,h2:26379/mymaster", "unix:///path".
  std::string Describe() const;
  // "redis-cluster://" etc.: the scheme as Describe writes it.
  std::string Scheme() const;
};

// Parses `text`, then (unless `validate` is false, for a caller that merges more
// settings first) Validate. Errors are InvalidArgument, quote the URL (passwords
// masked) and name the part that is wrong.
Result<Url> ParseUrl(std::string_view text, bool validate = true);

// `text` with every password replaced by ***.
std::string MaskPasswords(std::string_view text);

// Checks the combinations a URL cannot express alone (also after RedisStoreOptions
// fields were merged in): tls_* without TLS, a certificate without its key (or the
// reverse), a sentinel URL without a master name, a database on a cluster, sentinel
// credentials outside sentinel, a user name without a password. `where` prefixes the
// message (e.g. the masked URL).
Status Validate(const Url& u, std::string_view where);

}  // namespace sluice::redis
