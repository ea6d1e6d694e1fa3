// The pure cluster routing logic: CRC16, key -> slot (checked against a real
// cluster-enabled redis-server's CLUSTER KEYSLOT), slot map parsing, redirects.
#include "redis/cluster_slots.h"

#include <gtest/gtest.h>

#include <random>

#include "shared_cluster.h"
#include "sluice/key.h"

namespace sluice::redis {
namespace {

TEST(Crc16Test, XmodemCheckValue) {
  // The CRC-16/XMODEM catalogue check value, and the one Redis's crc16.c documents.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
}

TEST(KeySlotTest, KnownSlots) {
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot(""), 0);
}

TEST(KeySlotTest, HashTagRule) {
  // The bytes between the first '{' and the next '}' decide, when not empty.
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  // An empty tag or no closing brace: the whole key.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") & 16383);
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") & 16383);
  EXPECT_EQ(KeySlot("}foo{bar}"), KeySlot("bar"));
}

TEST(KeySlotTest, SluiceKeysOfOneCallerShareASlot) {
  auto a = StoreKey("sluice", "user:42", "per_second");
  auto b = StoreKey("sluice", "user:42", "per_day");
  auto c = StoreKey("sluice", "user:{42}", "per_day");  // user braces are escaped
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(KeySlot(*a), KeySlot(*b));
  EXPECT_EQ(KeySlot(*a + ":log"), KeySlot(*a));  // the sliding log's second key
  EXPECT_NE(*c, *b);
}

// Every slot computed here must be the one Redis computes.
TEST(KeySlotTest, MatchesRedisClusterKeyslot) {
  sluice::testing::RedisCluster* cluster = sluice::testing::SharedTestCluster();
  ASSERT_NE(cluster, nullptr);
  std::mt19937 rng(20261201);
  std::vector<std::string> keys = {"foo", "{a}b", "a{}b", "{{}}", "x{y", "}{z}", "{", "}"};
  const std::string alphabet = "ab{}:%\x01\xff";
  for (int i = 0; i < 300; ++i) {
    std::string k;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int j = 0; j < len; ++j) k.push_back(alphabet[rng() % alphabet.size()]);
    keys.push_back(k);
  }
  for (int i = 0; i < 100; ++i) {
    auto k = StoreKey("sluice", "caller-" + std::to_string(rng()), "p");
    ASSERT_TRUE(k.ok());
    keys.push_back(*k);
  }
  for (const std::string& k : keys) {
    auto r = cluster->Command(0, {"CLUSTER", "KEYSLOT", k});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_FALSE(r->is_error()) << r->str;
    EXPECT_EQ(KeySlot(k), r->integer) << "key '" << k << "'";
  }
}

Reply Str(std::string s) {
  Reply r;
  r.type = REDIS_REPLY_STRING;
  r.str = std::move(s);
  return r;
}
Reply Int(long long v) {
  Reply r;
  r.type = REDIS_REPLY_INTEGER;
  r.integer = v;
  return r;
}
Reply Arr(std::vector<Reply> e) {
  Reply r;
  r.type = REDIS_REPLY_ARRAY;
  r.elements = std::move(e);
  return r;
}
Reply ShardNode(std::string endpoint, long long port, std::string role, std::string health) {
  return Arr({Str("id"), Str("abc"), Str("port"), Int(port), Str("ip"), Str("127.0.0.9"),
              Str("endpoint"), Str(std::move(endpoint)), Str("role"), Str(std::move(role)),
              Str("replication-offset"), Int(1), Str("health"), Str(std::move(health))});
}

TEST(SlotMapTest, ParsesClusterShards) {
  Reply shards = Arr({
      Arr({Str("slots"), Arr({Int(0), Int(5460)}), Str("nodes"),
           Arr({ShardNode("10.0.0.1", 7000, "master", "online"),
                ShardNode("10.0.0.4", 7003, "replica", "online")})}),
      // A failover in progress: the failed old primary is still listed as master.
      Arr({Str("slots"), Arr({Int(5461), Int(10922)}), Str("nodes"),
           Arr({ShardNode("10.0.0.2", 7001, "master", "fail"),
                ShardNode("10.0.0.5", 7004, "master", "online")})}),
      // Two ranges, and slots sent as strings; an unknown endpoint ("?") uses ip.
      Arr({Str("slots"), Arr({Str("10923"), Str("16000"), Int(16001), Int(16383)}), Str("nodes"),
           Arr({ShardNode("?", 7002, "master", "online")})}),
      // A shard without slots (a new, empty primary) is skipped.
      Arr({Str("slots"), Arr({}), Str("nodes"),
           Arr({ShardNode("10.0.0.9", 7009, "master", "online")})}),
  });
  auto map = ParseClusterShards(shards, "seed");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->uncovered(), 0);
  ASSERT_EQ(map->primaries().size(), 3u);
  EXPECT_EQ(map->primaries()[map->owner(0)], (Endpoint{"10.0.0.1", 7000}));
  EXPECT_EQ(map->primaries()[map->owner(5460)], (Endpoint{"10.0.0.1", 7000}));
  EXPECT_EQ(map->primaries()[map->owner(5461)], (Endpoint{"10.0.0.5", 7004}));
  EXPECT_EQ(map->primaries()[map->owner(16383)], (Endpoint{"127.0.0.9", 7002}));
  EXPECT_EQ(map->owner(16000), map->owner(16001));
}

// A node with `tls-cluster yes` and a plain port lists both: a TLS client must connect
// to "tls-port", a plain one to "port" (before, a TLS client was sent to the plain port).
TEST(SlotMapTest, TakesTheTlsPortForATlsClient) {
  Reply node = Arr({Str("id"), Str("abc"), Str("port"), Int(7000), Str("tls-port"), Int(8000),
                    Str("ip"), Str("10.0.0.1"), Str("endpoint"), Str("10.0.0.1"), Str("role"),
                    Str("master"), Str("health"), Str("online")});
  Reply tls_only = Arr({Str("id"), Str("abd"), Str("tls-port"), Int(8001), Str("ip"),
                        Str("10.0.0.2"), Str("role"), Str("master"), Str("health"), Str("online")});
  Reply shards =
      Arr({Arr({Str("slots"), Arr({Int(0), Int(8000)}), Str("nodes"), Arr({node})}),
           Arr({Str("slots"), Arr({Int(8001), Int(16383)}), Str("nodes"), Arr({tls_only})})});
  auto tls = ParseClusterShards(shards, "seed", /*tls=*/true);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->primaries()[tls->owner(0)], (Endpoint{"10.0.0.1", 8000}));
  EXPECT_EQ(tls->primaries()[tls->owner(9000)], (Endpoint{"10.0.0.2", 8001}));
  auto plain = ParseClusterShards(shards, "seed", /*tls=*/false);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->primaries()[plain->owner(0)], (Endpoint{"10.0.0.1", 7000}));
}

TEST(SlotMapTest, RejectsMalformedShards) {
  EXPECT_FALSE(ParseClusterShards(Str("x"), "seed").ok());
  EXPECT_FALSE(ParseClusterShards(Arr({Arr({Str("slots"), Arr({Int(0)}), Str("nodes"),
                                            Arr({ShardNode("a", 1, "master", "online")})})}),
                                  "seed")
                   .ok());
  EXPECT_FALSE(ParseClusterShards(Arr({Arr({Str("slots"), Arr({Int(5), Int(16384)}), Str("nodes"),
                                            Arr({ShardNode("a", 1, "master", "online")})})}),
                                  "seed")
                   .ok());
  EXPECT_FALSE(ParseClusterShards(Arr({Arr({Str("slots"), Arr({Int(0), Int(1)}), Str("nodes"),
                                            Arr({ShardNode("a", 1, "replica", "online")})})}),
                                  "seed")
                   .ok());
  Reply error;
  error.type = REDIS_REPLY_ERROR;
  error.str = "ERR unknown subcommand 'SHARDS'";
  auto e = ParseClusterShards(error, "seed");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SHARDS"), std::string::npos);
}

TEST(SlotMapTest, ParsesClusterSlots) {
  Reply slots = Arr({
      Arr({Int(0), Int(100), Arr({Str("10.0.0.1"), Int(7000), Str("id1")}),
           Arr({Str("10.0.0.4"), Int(7003), Str("id4")})}),
      Arr({Int(101), Int(16383), Arr({Str(""), Int(7001), Str("id2")})}),
  });
  auto map = ParseClusterSlots(slots, "seed");
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  EXPECT_EQ(map->uncovered(), 0);
  EXPECT_EQ(map->primaries()[map->owner(100)], (Endpoint{"10.0.0.1", 7000}));
  EXPECT_EQ(map->primaries()[map->owner(101)], (Endpoint{"seed", 7001}));
  EXPECT_FALSE(ParseClusterSlots(Arr({Arr({Int(5), Int(1), Arr({Str("a"), Int(1)})})}), "s").ok());
}

TEST(SlotMapTest, PatchMovesOneSlot) {
  SlotMap map;
  map.Assign(0, 16383, {"a", 1});
  EXPECT_EQ(map.uncovered(), 0);
  map.Patch(77, {"b", 2});
  EXPECT_EQ(map.primaries()[map.owner(77)], (Endpoint{"b", 2}));
  EXPECT_EQ(map.primaries()[map.owner(76)], (Endpoint{"a", 1}));
  EXPECT_EQ(map.primaries()[map.owner(78)], (Endpoint{"a", 1}));
  SlotMap empty;
  EXPECT_EQ(empty.uncovered(), 16384);
}

}  // namespace
}  // namespace sluice::redis
