// Internal pieces of the HTTP middleware, exposed to the tests: address parsing, proxy
// walking, and header formatting.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/decision.h"
#include "sluice/http.h"
#include "sluice/policy.h"
#include "sluice/status.h"

namespace sluice::http::internal {

// An IPv4 or IPv6 address. IPv4 (including IPv4-mapped IPv6) uses bytes[0..3].
struct IpAddress {
  std::array<std::uint8_t, 16> bytes{};
  bool v4 = false;
  bool operator==(const IpAddress&) const = default;
};

// Parses an address with inet_pton: "192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1" (as
// IPv4), and a bracketed "[2001:db8::1]". A zone ("fe80::1%eth0") is ignored. No ports.
std::optional<IpAddress> ParseIp(std::string_view text);

// Like ParseIp, and also accepts a port: "192.0.2.1:8080", "[2001:db8::1]:443".
std::optional<IpAddress> ParseIpWithOptionalPort(std::string_view text);

// "192.0.2.1", "2001:db8::1"; with a prefix shorter than the address, the masked network
// and the prefix: "2001:db8:1:2::/64".
std::string FormatIp(const IpAddress& ip, int prefix_bits);

// A network: address and prefix length (0-32 for IPv4, 0-128 for IPv6).
struct Cidr {
  IpAddress network;
  int prefix = 0;
  bool Contains(const IpAddress& ip) const;
};

// "10.0.0.0/8", "fd00::/8", or one address. An IPv4-mapped IPv6 network maps to IPv4
// ("::ffff:10.0.0.0/104" == "10.0.0.0/8"). Errors name the text.
Result<Cidr> ParseCidr(std::string_view text);

class CidrSet {
 public:
  static Result<CidrSet> Parse(const std::vector<std::string>& texts, std::string_view field);
  bool Contains(const IpAddress& ip) const;
  bool empty() const { return nets_.empty(); }

 private:
  std::vector<Cidr> nets_;
};

// The client address of a request whose TCP peer is `peer`: `peer` itself unless it is
// a trusted proxy; then the forwarding entries are walked from the right past trusted
// hops, and the first untrusted one is the client. A malformed entry, or more than
// `max_hops` trusted entries, ends the walk with the peer itself (a client never chooses
// its key). `header_values` are the forwarding fields in the order received; `truncated`
// says that more fields were left out on the left (a walk reaching them ends at the peer).
IpAddress ResolveClientIp(const IpAddress& peer, const CidrSet& trusted, ForwardedHeader header,
                          std::span<const std::string_view> header_values, std::size_t max_hops,
                          bool truncated = false);

// The node address of one RFC 7239 forwarded-element ("for=192.0.2.1;proto=https"), or
// nothing if it has no valid "for" address ("unknown", obfuscated, malformed).
std::optional<IpAddress> ParseForwardedElement(std::string_view element);

// --- Header fields ---------------------------------------------------------------

// How a policy is advertised in RateLimit-Policy: q units per w seconds.
//  - window algorithms: q = limit, w = window (rounded up to whole seconds);
//  - token bucket / GCRA: q = capacity (burst), w = the time the rate limit/window takes
//    to refill the whole capacity (rounded up), so q/w is the sustained rate and the
//    remaining count r never exceeds q.
//  - concurrency limits: q = max_in_flight, no w, and qu="concurrent-requests" (the
//    draft's quota unit for requests in flight).
struct QuotaWindow {
  std::uint64_t q = 0;
  std::int64_t w = 0;
  bool concurrent = false;
};
QuotaWindow PolicyQuotaWindow(const Policy& p);

// Seconds, rounded up, from microseconds (negative counts as 0).
std::int64_t CeilSeconds(Micros us);

// The reset ("t", X-RateLimit-Reset) of a decision in seconds: for a denial, when a
// request of this cost can pass (ceil(retry_after)); otherwise when the limit is fully
// available again (ceil(reset_after)).
std::int64_t ResetSeconds(const Decision& d);

// Retry-After of a denial: ceil(retry_after), and never earlier than ResetSeconds(d).
std::int64_t RetryAfterSeconds(const Decision& d);

// One member of a RateLimit-Policy or RateLimit list.
struct PolicyItem {
  std::string_view name;
  QuotaWindow qw;
};
struct LimitItem {
  std::string_view name;
  std::uint64_t r = 0;
  std::int64_t t = 0;
};
// Structured-field lists (RFC 9651 serialisation: members joined by ", ").
std::string FormatRateLimitPolicy(std::span<const PolicyItem> items);
std::string FormatRateLimit(std::span<const LimitItem> items);
// X-RateLimit-Limit with several limits, as Envoy's draft-03 headers write it: the
// binding limit's capacity, then each limit's quota policy, "q;w=W" (a concurrency
// limit: "q;qu=\"concurrent-requests\"") with ";name=..." when its name is not empty.
std::string FormatLimitList(std::uint64_t binding_limit, std::span<const PolicyItem> items);
// Appends `s` as an sf-string (quoted, with '"' and '\' escaped; other bytes outside
// printable ASCII are dropped).
void AppendSfString(std::string& out, std::string_view s);
// Appends `s` as a JSON string.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace sluice::http::internal
