// Client addresses: parsing with inet_pton, CIDR sets, and the walk through
// X-Forwarded-For / Forwarded past trusted proxies. No regex, no allocation on the
// request path except the formatted key.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "http/internal.h"

namespace sluice::http::internal {
namespace {

constexpr std::size_t kMaxAddressText = 64;      // longest address text we look at
constexpr std::size_t kMaxForwardedEntry = 256;  // longest forwarding entry we parse

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool AllDigits(std::string_view s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool IsV4Mapped(const std::uint8_t* b) {
  for (int i = 0; i < 10; ++i) {
    if (b[i] != 0) return false;
  }
  return b[10] == 0xff && b[11] == 0xff;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// InvalidArgument("'<text>'<what>"), built with append (GCC 12 warns falsely on the
// equivalent chain of operator+).
Status BadCidr(std::string_view text, std::string_view what) {
  std::string m = "'";
  m.append(text);
  m.append("'");
  m.append(what);
  return Status::InvalidArgument(std::move(m));
}

}  // namespace

std::optional<IpAddress> ParseIp(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (const auto pct = text.find('%'); pct != std::string_view::npos) {
    text = text.substr(0, pct);  // zone index: not part of the address
  }
  if (text.empty() || text.size() >= kMaxAddressText) return std::nullopt;
  if (text.find('\0') != std::string_view::npos) return std::nullopt;  // inet_pton would stop there
  char buf[kMaxAddressText];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress ip;
  if (text.find(':') == std::string_view::npos) {
    if (inet_pton(AF_INET, buf, ip.bytes.data()) != 1) return std::nullopt;
    ip.v4 = true;
    return ip;
  }
  std::uint8_t b[16];
  if (inet_pton(AF_INET6, buf, b) != 1) return std::nullopt;
  if (IsV4Mapped(b)) {
    std::memcpy(ip.bytes.data(), b + 12, 4);
    ip.v4 = true;
  } else {
    std::memcpy(ip.bytes.data(), b, 16);
  }
  return ip;
}

std::optional<IpAddress> ParseIpWithOptionalPort(std::string_view text) {
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view after = text.substr(close + 1);
    if (!after.empty() && (after.front() != ':' || !AllDigits(after.substr(1), 5))) {
      return std::nullopt;
    }
    return ParseIp(text.substr(1, close - 1));
  }
  const auto colon = text.find(':');
  if (colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
    // Exactly one colon: IPv4 with a port.
    if (!AllDigits(text.substr(colon + 1), 5)) return std::nullopt;
    auto ip = ParseIp(text.substr(0, colon));
    if (!ip || !ip->v4) return std::nullopt;
    return ip;
  }
  return ParseIp(text);
}

std::string FormatIp(const IpAddress& ip, int prefix_bits) {
  const int full = ip.v4 ? 32 : 128;
  prefix_bits = std::clamp(prefix_bits, 0, full);
  IpAddress masked = ip;
  for (int i = 0; i < full / 8; ++i) {
    const int keep = std::clamp(prefix_bits - i * 8, 0, 8);
    masked.bytes[i] &= static_cast<std::uint8_t>(0xff00 >> keep);
  }
  char buf[INET6_ADDRSTRLEN + 8];
  inet_ntop(ip.v4 ? AF_INET : AF_INET6, masked.bytes.data(), buf, sizeof(buf));
  std::string out(buf);
  if (prefix_bits < full) {
    out.push_back('/');
    out.append(std::to_string(prefix_bits));
  }
  return out;
}

bool Cidr::Contains(const IpAddress& ip) const {
  if (ip.v4 != network.v4) return false;
  const int whole = prefix / 8;
  if (std::memcmp(ip.bytes.data(), network.bytes.data(), static_cast<std::size_t>(whole)) != 0) {
    return false;
  }
  const int rest = prefix % 8;
  if (rest == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff00 >> rest);
  return (ip.bytes[whole] & mask) == (network.bytes[whole] & mask);
}

Result<Cidr> ParseCidr(std::string_view text) {
  const std::string_view original = text;
  text = TrimOws(text);
  std::string_view addr = text;
  std::optional<int> prefix;
  if (const auto slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    const std::string_view p = text.substr(slash + 1);
    if (!AllDigits(p, 3)) {
      return BadCidr(original, ": bad prefix length");
    }
    prefix = std::stoi(std::string(p));
  }
  auto ip = ParseIp(addr);
  if (!ip) {
    return BadCidr(original, " is not an IP address or CIDR");
  }
  const bool mapped = ip->v4 && addr.find(':') != std::string_view::npos;
  int bits = prefix.value_or(mapped ? 128 : (ip->v4 ? 32 : 128));
  if (mapped) {
    if (bits < 96 || bits > 128) {
      return BadCidr(original, ": an IPv4-mapped network needs a prefix of 96-128");
    }
    bits -= 96;
  }
  if (bits < 0 || bits > (ip->v4 ? 32 : 128)) {
    return BadCidr(original, ": prefix length out of range");
  }
  return Cidr{*ip, bits};
}

Result<CidrSet> CidrSet::Parse(const std::vector<std::string>& texts, std::string_view field) {
  CidrSet set;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto c = ParseCidr(texts[i]);
    if (!c.ok()) {
      return Status::InvalidArgument(std::string(field) + "[" + std::to_string(i) +
                                     "]: " + c.status().message());
    }
    set.nets_.push_back(*c);
  }
  return set;
}

bool CidrSet::Contains(const IpAddress& ip) const {
  for (const Cidr& c : nets_) {
    if (c.Contains(ip)) return true;
  }
  return false;
}

std::optional<IpAddress> ParseForwardedElement(std::string_view element) {
  std::optional<IpAddress> found;
  bool seen_for = false;
  while (true) {
    const auto semi = element.find(';');
    std::string_view pair = TrimOws(element.substr(0, semi));
    const auto eq = pair.find('=');
    if (eq == std::string_view::npos) return std::nullopt;  // not name=value
    if (EqualsIgnoreCase(TrimOws(pair.substr(0, eq)), "for")) {
      if (seen_for) return std::nullopt;  // two "for" in one element: ambiguous
      seen_for = true;
      std::string_view value = TrimOws(pair.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
        // A quoted-pair could hide anything; addresses never need one.
        if (value.find('\\') != std::string_view::npos) return std::nullopt;
      } else if (value.find('"') != std::string_view::npos) {
        return std::nullopt;
      }
      found = ParseIpWithOptionalPort(value);  // "unknown", "_hidden" -> nullopt
      if (!found) return std::nullopt;
    }
    if (semi == std::string_view::npos) break;
    element = element.substr(semi + 1);
  }
  return found;
}

IpAddress ResolveClientIp(const IpAddress& peer, const CidrSet& trusted, ForwardedHeader header,
                          std::span<const std::string_view> header_values, std::size_t max_hops,
                          bool truncated) {
  if (header == ForwardedHeader::kNone || trusted.empty() || !trusted.Contains(peer)) return peer;
  IpAddress current = peer;
  std::size_t hops = 0;
  for (auto it = header_values.rbegin(); it != header_values.rend(); ++it) {
    std::string_view rest = *it;
    while (true) {
      const auto comma = rest.rfind(',');
      const std::string_view entry =
          TrimOws(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
      if (++hops > max_hops || entry.empty() || entry.size() > kMaxForwardedEntry) return peer;
      const std::optional<IpAddress> hop = header == ForwardedHeader::kForwarded
                                               ? ParseForwardedElement(entry)
                                               : ParseIpWithOptionalPort(entry);
      if (!hop) return peer;
      current = *hop;
      if (!trusted.Contains(current)) return current;
      if (comma == std::string_view::npos) break;
      rest = rest.substr(0, comma);
    }
  }
  if (truncated) return peer;
  // Every hop was a trusted address: the request started at the leftmost one.
  return current;
}

}  // namespace sluice::http::internal
