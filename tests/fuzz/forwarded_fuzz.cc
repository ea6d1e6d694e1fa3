// X-Forwarded-For / Forwarded (RFC 7239) walking, and the address and CIDR parsers
// under it: a client controls these header bytes. Nothing crashes, an untrusted peer
// is always the client, and every parsed address formats.
//
// Input: byte 0 picks the header (even: X-Forwarded-For, odd: Forwarded), byte 1 the
// hop limit (0-7), `truncated` (bit 3) and the peer (bit 4: untrusted); the rest is
// header field values, one per line.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "http/internal.h"

namespace hi = sluice::http::internal;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static const hi::CidrSet trusted = [] {
    auto s = hi::CidrSet::Parse({"10.0.0.0/8", "192.168.0.0/16", "fd00::/8"}, "trusted");
    FUZZ_CHECK(s.ok());
    return *s;
  }();
  static const hi::IpAddress proxy = *hi::ParseIp("10.0.0.1");
  static const hi::IpAddress stranger = *hi::ParseIp("203.0.113.5");
  const hi::IpAddress& peer = (data[1] & 16) ? stranger : proxy;
  const auto header = data[0] % 2 ? sluice::http::ForwardedHeader::kForwarded
                                  : sluice::http::ForwardedHeader::kXForwardedFor;
  const std::size_t max_hops = data[1] & 7;
  const bool truncated = (data[1] & 8) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  std::vector<std::string_view> values;
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    values.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  const hi::IpAddress client =
      hi::ResolveClientIp(peer, trusted, header, values, max_hops, truncated);
  // An untrusted peer's headers are never read. (Behind a trusted peer a trusted
  // address is a valid answer: "10.5.0.2" appended by the proxy 10.0.0.1 is a request
  // that started inside; the fuzzer's first "crash" was this check being too strict.)
  if (!trusted.Contains(peer)) FUZZ_CHECK(client == peer);
  FUZZ_CHECK(!hi::FormatIp(client, client.v4 ? 32 : 128).empty());

  for (std::string_view v : values) {
    if (auto ip = hi::ParseForwardedElement(v)) {
      FUZZ_CHECK(!hi::FormatIp(*ip, ip->v4 ? 32 : 128).empty());
    }
    if (auto ip = hi::ParseIpWithOptionalPort(v)) {
      FUZZ_CHECK(!hi::FormatIp(*ip, ip->v4 ? 24 : 64).empty());
    }
    if (auto c = hi::ParseCidr(v); !c.ok()) FUZZ_CHECK(!c.status().message().empty());
  }
  return 0;
}
