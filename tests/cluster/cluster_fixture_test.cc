// The local cluster fixture itself: it starts a healthy 3+3 cluster, its fault helpers
// do what they say, and the slot map parsers read the real cluster's replies.
#include <gtest/gtest.h>

#include "redis/cluster_slots.h"
#include "redis_cluster.h"
#include "shared_cluster.h"

namespace sluice::testing {
namespace {

TEST(ClusterFixtureTest, StartsThreePrimariesWithOneReplicaEach) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  auto nodes = c->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 6u);
  int primaries = 0, slots = 0;
  for (const ClusterNodeInfo& n : *nodes) {
    EXPECT_FALSE(n.id.empty());
    EXPECT_FALSE(n.failed);
    if (n.primary) {
      ++primaries;
      slots += n.slots;
      int replicas = 0;
      for (const ClusterNodeInfo& r : *nodes) replicas += r.primary_id == n.id;
      EXPECT_EQ(replicas, 1) << "primary on port " << n.port;
    }
  }
  EXPECT_EQ(primaries, 3);
  EXPECT_EQ(slots, 16384);
  EXPECT_TRUE(c->WaitHealthy(std::chrono::seconds(1)).ok());
}

// The parsers read what the real cluster sends, and agree with CLUSTER SLOTS.
TEST(ClusterFixtureTest, SlotMapFromRealShardsAndSlotsReplies) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  auto shards = c->Command(0, {"CLUSTER", "SHARDS"});
  auto slots = c->Command(0, {"CLUSTER", "SLOTS"});
  ASSERT_TRUE(shards.ok() && slots.ok());
  auto a = redis::ParseClusterShards(*shards, "127.0.0.1");
  auto b = redis::ParseClusterSlots(*slots, "127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->uncovered(), 0);
  EXPECT_EQ(a->primaries().size(), 3u);
  for (int slot : {0, 1, 5460, 5461, 9000, 10922, 10923, 16383}) {
    auto node = c->PrimaryForSlot(slot);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    const redis::Endpoint expected{"127.0.0.1", c->node(*node).port()};
    EXPECT_EQ(a->primaries()[a->owner(slot)], expected) << "slot " << slot;
    EXPECT_EQ(b->primaries()[b->owner(slot)], expected) << "slot " << slot;
  }
}

// Every fault helper on a cluster of its own (they change the topology).
TEST(ClusterFixtureTest, FaultHelpers) {
  auto started = RedisCluster::Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  RedisCluster& c = **started;

  // CLUSTER FAILOVER: the replica becomes the primary, the old primary its replica.
  auto replicas = c.Replicas();
  ASSERT_TRUE(replicas.ok());
  ASSERT_EQ(replicas->size(), 3u);
  const std::size_t promoted = (*replicas)[0];
  ASSERT_TRUE(c.Failover(promoted).ok());
  auto nodes = c.Nodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[promoted].primary);
  EXPECT_GT((*nodes)[promoted].slots, 0);

  // Reshard: 100 slots move, a key in a moved slot is then served by the target.
  auto primaries = c.Primaries();
  ASSERT_TRUE(primaries.ok());
  ASSERT_EQ(primaries->size(), 3u);
  const std::size_t from = (*primaries)[0], to = (*primaries)[1];
  const int before = (*nodes)[to].slots;
  Status resharded = c.Reshard(from, to, 100);
  ASSERT_TRUE(resharded.ok()) << resharded.ToString();
  nodes = c.Nodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ((*nodes)[to].slots, before + 100);

  // SCRIPT FLUSH on one node: a loaded script is gone there.
  auto loaded = c.Command(from, {"SCRIPT", "LOAD", "return 1"});
  ASSERT_TRUE(loaded.ok() && !loaded->is_error());
  ASSERT_TRUE(c.ScriptFlush(from).ok());
  auto exists = c.Command(from, {"SCRIPT", "EXISTS", loaded->str});
  ASSERT_TRUE(exists.ok());
  ASSERT_EQ(exists->elements.size(), 1u);
  EXPECT_EQ(exists->elements[0].integer, 0);

  // kill -9 of a primary: its replica takes over; the killed node rejoins as replica.
  auto taken = c.KillPrimary(from);
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_FALSE(c.alive(from));
  nodes = c.Nodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_TRUE((*nodes)[*taken].primary);
  Status restarted = c.RestartNode(from);
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  nodes = c.Nodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_FALSE((*nodes)[from].primary);
  EXPECT_EQ((*nodes)[from].primary_id, (*nodes)[*taken].id);
}

}  // namespace
}  // namespace sluice::testing
