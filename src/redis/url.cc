#include "redis/url.h"

#include <charconv>

namespace sluice::redis {
namespace {

// The URL with any password replaced by "***", for error messages.
std::string Masked(std::string_view text) {
  const std::size_t scheme = text.find("://");
  const std::size_t at = text.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(text);
  }
  const std::size_t colon = text.find(':', scheme + 3);
  if (colon == std::string_view::npos || colon > at) return std::string(text);
  return std::string(text.substr(0, colon + 1)) + "***" + std::string(text.substr(at));
}

Status Bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("bad Redis URL '" + Masked(text) + "': " + why +
                                 " (expected redis://[user:password@]host:port[/db] or "
                                 "unix:///path/to/socket[?db=N])");
}

bool ParseInt(std::string_view s, int min, int max, int* out) {
  if (s.empty()) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

// Decodes %XX escapes (user names and passwords may contain ':' or '@').
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

}  // namespace

std::string Url::Describe() const {
  if (unix_socket) return "unix://" + path + (db != 0 ? "?db=" + std::to_string(db) : "");
  const bool v6 = host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) +
         (db != 0 ? "/" + std::to_string(db) : "");
}

Result<Url> ParseUrl(std::string_view text) {
  Url u;
  std::string_view rest;
  if (text.starts_with("unix://")) {
    u.unix_socket = true;
    rest = text.substr(7);
    const std::size_t q = rest.find('?');
    std::string_view query;
    if (q != std::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest.front() != '/') return Bad(text, "the socket path must be absolute");
    u.path = std::string(rest);
    if (!query.empty()) {
      if (!query.starts_with("db=") || !ParseInt(query.substr(3), 0, 1 << 20, &u.db)) {
        return Bad(text, "the only query parameter is db=N");
      }
    }
    return u;
  }
  if (!text.starts_with("redis://")) return Bad(text, "unknown scheme");
  rest = text.substr(8);
  // Credentials: everything up to the last '@' (passwords may contain '@' if escaped).
  const std::size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = cred.find(':');
    std::string_view user = cred, pass;
    if (colon != std::string_view::npos) {
      user = cred.substr(0, colon);
      pass = cred.substr(colon + 1);
    } else {
      // "redis://secret@host": a bare token is the password, as redis-cli reads it.
      pass = cred;
      user = {};
    }
    if (!PercentDecode(user, &u.user) || !PercentDecode(pass, &u.password)) {
      return Bad(text, "malformed %-escape in the credentials");
    }
    if (u.password.empty()) return Bad(text, "empty password");
  }
  std::string_view hostport = rest;
  const std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !ParseInt(db, 0, 1 << 20, &u.db)) {
      return Bad(text, "database '" + std::string(db) + "' is not a number");
    }
  }
  std::string_view host = hostport, port;
  if (hostport.starts_with("[")) {
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) return Bad(text, "unterminated IPv6 address");
    host = hostport.substr(1, close - 1);
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Bad(text, "junk after the IPv6 address");
      port = after.substr(1);
      if (port.empty()) return Bad(text, "empty port");
    }
  } else {
    const std::size_t colon = hostport.rfind(':');
    if (colon != std::string_view::npos) {
      host = hostport.substr(0, colon);
      port = hostport.substr(colon + 1);
      if (port.empty()) return Bad(text, "empty port");
    }
  }
  if (host.empty()) return Bad(text, "missing host");
  for (char c : host) {
    if (c == '/' || c == '@' || c == '?' || c == ' ' || c == '[' || c == ']') {
      return Bad(text, "invalid host '" + std::string(host) + "'");
    }
  }
  if (!port.empty() && !ParseInt(port, 1, 65535, &u.port)) {
    return Bad(text, "port '" + std::string(port) + "' is not a number in 1-65535");
  }
  u.host = std::string(host);
  return u;
}

}  // namespace sluice::redis
