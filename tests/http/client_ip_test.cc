// Client address parsing, CIDR sets and the proxy walk: spoofing, malformed and
// oversized forwarding headers, IPv6 grouping.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "http/internal.h"

namespace sluice::http::internal {
namespace {

IpAddress Ip(std::string_view s) {
  auto ip = ParseIp(s);
  EXPECT_TRUE(ip.has_value()) << s;
  return ip.value_or(IpAddress{});
}

CidrSet Set(std::vector<std::string> texts) {
  auto s = CidrSet::Parse(texts, "trusted");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : CidrSet{};
}

std::string Resolve(std::string_view peer, const CidrSet& trusted,
                    std::vector<std::string_view> values,
                    ForwardedHeader h = ForwardedHeader::kXForwardedFor,
                    std::size_t max_hops = 16) {
  IpAddress ip = ResolveClientIp(Ip(peer), trusted, h, values, max_hops);
  return FormatIp(ip, 128);
}

TEST(ParseIp, AcceptsIpv4Ipv6AndMapped) {
  auto v4 = ParseIp("192.0.2.1");
  ASSERT_TRUE(v4);
  EXPECT_TRUE(v4->v4);
  EXPECT_EQ(FormatIp(*v4, 32), "192.0.2.1");
  auto v6 = ParseIp("2001:DB8::1");
  ASSERT_TRUE(v6);
  EXPECT_FALSE(v6->v4);
  EXPECT_EQ(FormatIp(*v6, 128), "2001:db8::1");
  // IPv4-mapped IPv6 is the IPv4 address.
  EXPECT_EQ(ParseIp("::ffff:192.0.2.1"), v4);
  EXPECT_EQ(ParseIp("[2001:db8::1]"), v6);
  EXPECT_EQ(ParseIp("2001:db8::1%eth0"), v6);
}

TEST(ParseIp, RejectsMalformed) {
  for (std::string_view bad : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "abc", "1.2.3.4 ", " 1.2.3.4",
                               "::g", "[::1", "1.2.3.4/8", "01.2.3.4x", "unknown", "_hidden"}) {
    EXPECT_FALSE(ParseIp(bad)) << bad;
  }
  EXPECT_FALSE(ParseIp(std::string(1000, '1')));
  EXPECT_FALSE(ParseIp(std::string("1.2.3.4\0", 8)));
}

TEST(ParseIp, Ports) {
  EXPECT_EQ(ParseIpWithOptionalPort("192.0.2.1:8080"), ParseIp("192.0.2.1"));
  EXPECT_EQ(ParseIpWithOptionalPort("[2001:db8::1]:443"), ParseIp("2001:db8::1"));
  EXPECT_EQ(ParseIpWithOptionalPort("[2001:db8::1]"), ParseIp("2001:db8::1"));
  EXPECT_EQ(ParseIpWithOptionalPort("2001:db8::1"), ParseIp("2001:db8::1"));
  for (std::string_view bad :
       {"192.0.2.1:", "192.0.2.1:http", "[::1]x", "[::1]:", "[::1]:123456"}) {
    EXPECT_FALSE(ParseIpWithOptionalPort(bad)) << bad;
  }
}

TEST(FormatIp, GroupsByPrefix) {
  EXPECT_EQ(FormatIp(Ip("2001:db8:1:2:3:4:5:6"), 64), "2001:db8:1:2::/64");
  EXPECT_EQ(FormatIp(Ip("2001:db8:1:2:3:4:5:6"), 48), "2001:db8:1::/48");
  EXPECT_EQ(FormatIp(Ip("2001:db8:1:2:3:4:5:6"), 56), "2001:db8:1::/56");
  EXPECT_EQ(FormatIp(Ip("2001:db8:1:2ff:3:4:5:6"), 60), "2001:db8:1:2f0::/60");
  EXPECT_EQ(FormatIp(Ip("192.0.2.77"), 32), "192.0.2.77");
  EXPECT_EQ(FormatIp(Ip("192.0.2.77"), 24), "192.0.2.0/24");
  // IPv4-mapped addresses group as IPv4.
  EXPECT_EQ(FormatIp(Ip("::ffff:192.0.2.77"), 32), "192.0.2.77");
}

TEST(Cidr, ParsesAndMatches) {
  CidrSet s = Set({"10.0.0.0/8", "192.0.2.7", "fd00::/8", "::1", "::ffff:172.16.0.0/108"});
  EXPECT_TRUE(s.Contains(Ip("10.200.1.2")));
  EXPECT_FALSE(s.Contains(Ip("11.0.0.1")));
  EXPECT_TRUE(s.Contains(Ip("192.0.2.7")));
  EXPECT_FALSE(s.Contains(Ip("192.0.2.8")));
  EXPECT_TRUE(s.Contains(Ip("fd12:3456::1")));
  EXPECT_FALSE(s.Contains(Ip("fe80::1")));
  EXPECT_TRUE(s.Contains(Ip("::1")));
  EXPECT_TRUE(s.Contains(Ip("172.31.255.255")));  // ::ffff:172.16.0.0/108 == 172.16.0.0/12
  EXPECT_FALSE(s.Contains(Ip("172.32.0.0")));
  EXPECT_TRUE(s.Contains(Ip("::ffff:10.0.0.1")));  // a mapped client matches an IPv4 net
}

TEST(Cidr, ErrorsNameTheText) {
  for (std::string bad :
       {"10.0.0.0/33", "fd00::/129", "nonsense", "10.0.0.0/x", "::ffff:1.2.3.4/90"}) {
    auto s = CidrSet::Parse({"10.0.0.0/8", bad}, "client_ip.trusted_proxies");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("client_ip.trusted_proxies[1]"), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find(bad), std::string::npos) << s.status().message();
  }
}

TEST(ResolveClientIp, UntrustedPeerForwardingHeaderIsIgnored) {
  CidrSet trusted = Set({"10.0.0.0/8"});
  EXPECT_EQ(Resolve("203.0.113.9", trusted, {"1.1.1.1"}), "203.0.113.9");
  EXPECT_EQ(Resolve("203.0.113.9", trusted, {"10.0.0.1, 1.1.1.1"}), "203.0.113.9");
  // No trusted proxies at all: never read.
  EXPECT_EQ(Resolve("10.0.0.1", CidrSet{}, {"1.1.1.1"}), "10.0.0.1");
  // Trusted peer but header reading disabled.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"1.1.1.1"}, ForwardedHeader::kNone), "10.0.0.1");
}

TEST(ResolveClientIp, WalksTrustedChainFromTheRight) {
  CidrSet trusted = Set({"10.0.0.0/8", "2001:db8:ffff::/48"});
  // client -> 10.0.0.2 -> 10.0.0.1 (peer)
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"198.51.100.4, 10.0.0.2"}), "198.51.100.4");
  // Whatever the client wrote on the left is never reached.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"6.6.6.6, 7.7.7.7, 198.51.100.4, 10.0.0.2"}),
            "198.51.100.4");
  // Several header lines count as one list, in order.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"6.6.6.6", "198.51.100.4", "10.0.0.2"}), "198.51.100.4");
  // IPv6 hops, with brackets and ports.
  EXPECT_EQ(Resolve("2001:db8:ffff::1", trusted, {"2001:db8:1::5, [2001:db8:ffff::2]:443"}),
            "2001:db8:1::5");
  // IPv4 with a port.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"198.51.100.4:5555"}), "198.51.100.4");
  // Every hop trusted: the leftmost one sent the request.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"10.9.9.9, 10.0.0.2"}), "10.9.9.9");
  // Trusted peer, no header: the peer.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {}), "10.0.0.1");
}

TEST(ResolveClientIp, MalformedWalkedEntryFallsBackToPeer) {
  CidrSet trusted = Set({"10.0.0.0/8"});
  for (std::string_view bad :
       {"garbage", "", " , ", "198.51.100.4,", "unknown", "1.2.3.4.5", "[::1", "198.51.100.4 x"}) {
    EXPECT_EQ(Resolve("10.0.0.1", trusted, {bad}), "10.0.0.1") << "'" << bad << "'";
  }
  // Malformed entry behind a trusted hop.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"garbage, 10.0.0.2"}), "10.0.0.1");
  // Malformed text left of the client is never reached.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"garbage, 198.51.100.4"}), "198.51.100.4");
}

TEST(ResolveClientIp, OversizedHeadersAreBounded) {
  CidrSet trusted = Set({"10.0.0.0/8"});
  // Too many trusted hops: the walk stops at max_hops and keys by the peer.
  std::string many;
  for (int i = 0; i < 100; ++i) many += "10.0.0." + std::to_string(i % 250) + ", ";
  many += "10.0.0.3";
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {many}), "10.0.0.1");
  // A huge client-written prefix does not matter: the proxy's entry is on the right.
  std::string huge(1 << 20, 'A');
  huge += ", 198.51.100.4";
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {huge}), "198.51.100.4");
  // A huge single entry is malformed.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {std::string(1 << 20, '1')}), "10.0.0.1");
  // A million commas.
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {std::string(1 << 20, ',')}), "10.0.0.1");
}

// Property: whatever bytes a client puts in X-Forwarded-For, once a trusted proxy has
// appended the client's real address, the key is that address.
TEST(ResolveClientIp, RandomClientGarbageNeverChoosesTheKey) {
  CidrSet trusted = Set({"10.0.0.0/8", "fd00::/8"});
  std::mt19937 rng(42);
  const std::string alphabet = "0123456789abcdef.:,;[]\"= _-%/\\for\t\x01\xff";
  for (int i = 0; i < 5000; ++i) {
    std::string garbage;
    const int len = static_cast<int>(rng() % 80);
    for (int j = 0; j < len; ++j) garbage.push_back(alphabet[rng() % alphabet.size()]);
    EXPECT_EQ(Resolve("10.0.0.1", trusted, {garbage + ", 198.51.100.4"}), "198.51.100.4")
        << garbage;
    EXPECT_EQ(Resolve("10.0.0.1", trusted, {garbage, "198.51.100.4, 10.0.0.9"}), "198.51.100.4")
        << garbage;
    EXPECT_EQ(
        Resolve("10.0.0.1", trusted, {garbage + ", for=198.51.100.4"}, ForwardedHeader::kForwarded),
        "198.51.100.4")
        << garbage;
  }
}

TEST(Forwarded, ParsesRfc7239Elements) {
  EXPECT_EQ(ParseForwardedElement("for=192.0.2.60;proto=http;by=203.0.113.43"),
            ParseIp("192.0.2.60"));
  EXPECT_EQ(ParseForwardedElement("For=\"[2001:db8:cafe::17]:4711\""),
            ParseIp("2001:db8:cafe::17"));
  EXPECT_EQ(ParseForwardedElement("proto=https; for=\"192.0.2.43:47011\""), ParseIp("192.0.2.43"));
  EXPECT_FALSE(ParseForwardedElement("for=unknown"));
  EXPECT_FALSE(ParseForwardedElement("for=_hidden"));
  EXPECT_FALSE(ParseForwardedElement("proto=http"));
  EXPECT_FALSE(ParseForwardedElement("for=192.0.2.1;for=192.0.2.2"));
  EXPECT_FALSE(ParseForwardedElement("for=\"192.0.2.1"));
  EXPECT_FALSE(ParseForwardedElement("for=\"192.0.\\2.1\""));
  EXPECT_FALSE(ParseForwardedElement("garbage"));
}

TEST(Forwarded, WalksLikeXForwardedFor) {
  CidrSet trusted = Set({"10.0.0.0/8"});
  const auto fwd = ForwardedHeader::kForwarded;
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"for=198.51.100.4;proto=https, for=10.0.0.2"}, fwd),
            "198.51.100.4");
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"for=6.6.6.6", "for=\"[2001:db8::5]:1\""}, fwd),
            "2001:db8::5");
  EXPECT_EQ(Resolve("10.0.0.1", trusted, {"for=unknown"}, fwd), "10.0.0.1");
  EXPECT_EQ(Resolve("198.51.100.1", trusted, {"for=1.1.1.1"}, fwd), "198.51.100.1");
}

}  // namespace
}  // namespace sluice::http::internal
