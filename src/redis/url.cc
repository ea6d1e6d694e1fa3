#include "redis/url.h"

#include <charconv>

namespace sluice::redis {
namespace {

constexpr std::string_view kForms =
    "expected redis://[user:password@]host:port[/db], rediss://..., unix:///path[?db=N], "
    "redis-cluster://host:port[,host:port...], "
    "redis-sentinel://host:port[,host:port...]/MASTER[?db=N] or rediss-cluster://, "
    "rediss-sentinel://";

}  // namespace

std::string MaskPasswords(std::string_view text) {
  std::string out(text);
  const std::size_t scheme = out.find("://");
  const std::size_t q = out.find('?');
  const std::size_t at = out.rfind('@', q);
  if (scheme != std::string::npos && at != std::string::npos && at > scheme) {
    const std::size_t colon = out.find(':', scheme + 3);
    if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  }
  for (std::string_view key : {"sentinel_password="}) {
    std::size_t p = out.find(key);
    if (p == std::string::npos) continue;
    p += key.size();
    const std::size_t end = out.find('&', p);
    out.replace(p, (end == std::string::npos ? out.size() : end) - p, "***");
  }
  return out;
}

namespace {

bool ParseInt(std::string_view s, int min, int max, int* out) {
  if (s.empty()) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

// Decodes %XX escapes.
bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int v = 0;
    auto [p, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
    if (ec != std::errc() || p != in.data() + i + 3) return false;
    out->push_back(static_cast<char>(v));
    i += 2;
  }
  return true;
}

// Parses "host[:port]" or "[v6][:port]".
Status ParseHostPort(std::string_view hp, int default_port, HostPort* out) {
  std::string_view host = hp, port;
  if (hp.starts_with("[")) {
    const std::size_t close = hp.find(']');
    if (close == std::string_view::npos)
      return Status::InvalidArgument("unterminated IPv6 address");
    host = hp.substr(1, close - 1);
    std::string_view after = hp.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Status::InvalidArgument("junk after the IPv6 address");
      port = after.substr(1);
      if (port.empty()) return Status::InvalidArgument("empty port");
    }
  } else {
    const std::size_t colon = hp.rfind(':');
    if (colon != std::string_view::npos) {
      host = hp.substr(0, colon);
      port = hp.substr(colon + 1);
      if (port.empty()) return Status::InvalidArgument("empty port");
    }
  }
  if (host.empty()) return Status::InvalidArgument("missing host");
  for (char c : host) {
    if (c == '/' || c == '@' || c == '?' || c == ' ' || c == '[' || c == ']' || c == ',') {
      return Status::InvalidArgument("invalid host '" + std::string(host) + "'");
    }
  }
  out->host = std::string(host);
  out->port = default_port;
  if (!port.empty() && !ParseInt(port, 1, 65535, &out->port)) {
    return Status::InvalidArgument("port '" + std::string(port) + "' is not a number in 1-65535");
  }
  return Status::Ok();
}

struct SchemeInfo {
  std::string_view prefix;
  Topology topology;
  bool tls;
};
constexpr SchemeInfo kSchemes[] = {
    {"redis://", Topology::kStandalone, false},
    {"rediss://", Topology::kStandalone, true},
    {"redis-cluster://", Topology::kCluster, false},
    {"rediss-cluster://", Topology::kCluster, true},
    {"redis-sentinel://", Topology::kSentinel, false},
    {"rediss-sentinel://", Topology::kSentinel, true},
};

}  // namespace

std::string HostPort::Describe() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Url::Scheme() const {
  if (unix_socket) return "unix://";
  for (const SchemeInfo& s : kSchemes) {
    if (s.topology == topology && s.tls == tls.enabled) return std::string(s.prefix);
  }
  return "redis://";
}

std::string Url::Describe() const {
  if (unix_socket) return "unix://" + path + (db != 0 ? "?db=" + std::to_string(db) : "");
  std::string out = Scheme();
  if (endpoints.empty()) {
    out += HostPort{host, port}.Describe();
  } else {
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      if (i > 0) out += ',';
      out += endpoints[i].Describe();
    }
  }
  if (topology == Topology::kSentinel) {
    out += "/" + master_name;
    if (db != 0) out += "?db=" + std::to_string(db);
  } else if (db != 0) {
    out += "/" + std::to_string(db);
  }
  return out;
}

Status Validate(const Url& u, std::string_view where) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(where) + ": " + why);
  };
  if (!u.tls.enabled) {
    const char* set = !u.tls.ca_file.empty()     ? "tls_ca"
                      : !u.tls.cert_file.empty() ? "tls_cert"
                      : !u.tls.key_file.empty()  ? "tls_key"
                      : !u.tls.sni.empty()       ? "tls_sni"
                      : u.tls.insecure           ? "tls_insecure"
                                                 : nullptr;
    if (set != nullptr) {
      return bad(std::string(set) + " needs TLS: use rediss://, rediss-cluster:// or " +
                 "rediss-sentinel://");
    }
  }
  if (!u.tls.cert_file.empty() && u.tls.key_file.empty()) {
    return bad("tls_cert needs tls_key (the client certificate's private key)");
  }
  if (u.tls.cert_file.empty() && !u.tls.key_file.empty()) {
    return bad("tls_key needs tls_cert (the client certificate)");
  }
  if (u.topology == Topology::kSentinel && u.master_name.empty()) {
    return bad("a sentinel URL needs the master name: redis-sentinel://host:port/MASTER_NAME");
  }
  if (u.topology == Topology::kCluster && u.db != 0) {
    return bad("Redis Cluster has only database 0 (remove the /db or db=)");
  }
  if (u.topology != Topology::kSentinel &&
      (!u.sentinel_user.empty() || !u.sentinel_password.empty())) {
    return bad("sentinel_user and sentinel_password need a redis-sentinel:// URL");
  }
  if (!u.sentinel_user.empty() && u.sentinel_password.empty()) {
    return bad("sentinel_user needs sentinel_password");
  }
  if (!u.user.empty() && u.password.empty()) return bad("user '" + u.user + "' needs a password");
  if (u.unix_socket && u.tls.enabled) return bad("TLS over a unix socket is not supported");
  return Status::Ok();
}

namespace {

// Each step below fails with InvalidArgument saying what is wrong; ParseUrl names the
// URL (masked) and the accepted forms around it.
Status Why(const std::string& why) {
  return Status::InvalidArgument(why);
}

// The scheme: sets u's topology and TLS (or unix socket) and returns what follows it.
Status ParseScheme(std::string_view text, Url* u, std::string_view* rest) {
  if (text.starts_with("unix://")) {
    u->unix_socket = true;
    *rest = text.substr(7);
    return Status::Ok();
  }
  for (const SchemeInfo& s : kSchemes) {
    if (text.starts_with(s.prefix)) {
      u->topology = s.topology;
      u->tls.enabled = s.tls;
      *rest = text.substr(s.prefix.size());
      return Status::Ok();
    }
  }
  return Why("unknown scheme");
}

// "user:password@" or "password@" (as redis-cli) before the hosts, up to the last '@';
// `rest` is left at the hosts.
Status ParseCredentials(std::string_view* rest, Url* u) {
  const std::size_t at = rest->rfind('@');
  if (at == std::string_view::npos) return Status::Ok();
  const std::string_view cred = rest->substr(0, at);
  *rest = rest->substr(at + 1);
  const std::size_t colon = cred.find(':');
  std::string_view user, pass = cred;
  if (colon != std::string_view::npos) {
    user = cred.substr(0, colon);
    pass = cred.substr(colon + 1);
  }
  if (!PercentDecode(user, &u->user) || !PercentDecode(pass, &u->password)) {
    return Why("malformed %-escape in the credentials");
  }
  if (u->password.empty()) return Why("empty password");
  return Status::Ok();
}

// host[:port][,host[:port]...][/db or /MASTER_NAME], after the credentials.
Status ParseHostsAndPath(std::string_view rest, Url* u, bool* db_in_path) {
  std::string_view hosts = rest, path;
  if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hosts = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  const int default_port = u->topology == Topology::kSentinel ? 26379 : 6379;
  while (true) {
    const std::size_t comma = hosts.find(',');
    HostPort hp;
    if (Status s = ParseHostPort(hosts.substr(0, comma), default_port, &hp); !s.ok()) return s;
    u->endpoints.push_back(std::move(hp));
    if (comma == std::string_view::npos) break;
    hosts = hosts.substr(comma + 1);
  }
  if (u->topology == Topology::kStandalone && u->endpoints.size() > 1) {
    return Why("one host only: for several nodes use redis-cluster:// or redis-sentinel://");
  }
  u->host = u->endpoints.front().host;
  u->port = u->endpoints.front().port;
  if (u->topology == Topology::kSentinel) {
    if (!PercentDecode(path, &u->master_name) || u->master_name.find('/') != std::string::npos) {
      return Why("malformed master name '" + std::string(path) + "'");
    }
  } else if (!path.empty()) {
    if (!ParseInt(path, 0, 1 << 20, &u->db)) {
      return Why("database '" + std::string(path) + "' is not a number");
    }
    *db_in_path = true;
  }
  return Status::Ok();
}

// One query parameter, `name`=`value` (decoded), not seen before.
Status ApplyParameter(const std::string& name, const std::string& value, bool db_in_path, Url* u) {
  if (name == "db") {
    if (db_in_path) return Why("the database is given twice (/db and db=)");
    if (!ParseInt(value, 0, 1 << 20, &u->db)) {
      return Why("database '" + value + "' is not a number");
    }
    return Status::Ok();
  }
  if (name == "module") {
    if (value != "on" && value != "off") {
      return Why("module must be on or off (got '" + value + "')");
    }
    u->module = value == "on";
    return Status::Ok();
  }
  if (name == "tls_insecure") {
    if (value != "1" && value != "0" && value != "true" && value != "false") {
      return Why("tls_insecure must be 1 or 0 (got '" + value + "')");
    }
    u->tls.insecure = value == "1" || value == "true";
    return Status::Ok();
  }
  std::string* const text = name == "tls_ca"              ? &u->tls.ca_file
                            : name == "tls_cert"          ? &u->tls.cert_file
                            : name == "tls_key"           ? &u->tls.key_file
                            : name == "tls_sni"           ? &u->tls.sni
                            : name == "sentinel_user"     ? &u->sentinel_user
                            : name == "sentinel_password" ? &u->sentinel_password
                                                          : nullptr;
  if (text == nullptr) {
    return Why("unknown parameter '" + name +
               "' (known: db, module, tls_ca, tls_cert, tls_key, tls_sni, tls_insecure, "
               "sentinel_user, sentinel_password)");
  }
  *text = value;
  if (value.empty()) return Why("parameter '" + name + "' is empty");
  return Status::Ok();
}

// "name=value&..." after the '?'.
Status ParseQueryParameters(std::string_view query, bool db_in_path, Url* u) {
  std::vector<std::string> seen;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (param.empty()) continue;
    const std::size_t eq = param.find('=');
    const std::string name(param.substr(0, eq));
    std::string value;
    if (eq == std::string_view::npos) return Why("parameter '" + name + "' has no value");
    if (!PercentDecode(param.substr(eq + 1), &value)) {
      return Why("malformed %-escape in parameter '" + name + "'");
    }
    if (u->unix_socket && name != "db" && name != "module") {
      return Why("unknown parameter '" + name + "': unix:// takes only db=N and module=");
    }
    for (const std::string& s : seen) {
      if (s == name) return Why("parameter '" + name + "' given twice");
    }
    seen.push_back(name);
    if (Status s = ApplyParameter(name, value, db_in_path, u); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Result<Url> ParseUrl(std::string_view text, bool validate) {
  const std::string masked = MaskPasswords(text);
  auto bad = [&](const Status& why) {
    return Status::InvalidArgument("bad Redis URL '" + masked + "': " + why.message() + " (" +
                                   std::string(kForms) + ")");
  };
  Url u;
  std::string_view rest;
  std::string_view query;
  if (Status s = ParseScheme(text, &u, &rest); !s.ok()) return bad(s);
  if (const std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  bool db_in_path = false;
  if (u.unix_socket) {
    if (rest.empty() || rest.front() != '/') return bad(Why("the socket path must be absolute"));
    u.path = std::string(rest);
  } else {
    if (Status s = ParseCredentials(&rest, &u); !s.ok()) return bad(s);
    if (Status s = ParseHostsAndPath(rest, &u, &db_in_path); !s.ok()) return bad(s);
  }
  if (Status s = ParseQueryParameters(query, db_in_path, &u); !s.ok()) return bad(s);
  if (!validate) return u;
  if (Status s = Validate(u, "bad Redis URL '" + masked + "'"); !s.ok()) return s;
  return u;
}

}  // namespace sluice::redis
