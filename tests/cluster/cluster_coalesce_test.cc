// Coalesced calls on Redis Cluster (docs/redis.md, "Coalesced calls"): only calls of
// one hash slot share a script call (Redis refuses a script whose keys span slots).
// As in tests/integration/coalesce_test.cc, the calls are submitted from a callback on
// the I/O thread of the node's only connection, so they are queued together.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "redis/cluster_slots.h"
#include "shared_cluster.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

TEST(ClusterCoalesce, OnlyCallsOfOneSlotShareACall) {
  RedisCluster* cluster = SharedTestCluster();
  ASSERT_NE(cluster, nullptr);
  RedisStoreOptions o;
  o.url = cluster->Url();
  o.connections = 1;
  o.coalesce = 16;
  o.call_timeout = 30'000'000;  // behaviour, not speed
  o.on_warning = [](std::string_view) {};
  auto created = RedisStore::Create(std::move(o));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  RedisStore& store = **created;

  // The trigger's primary, and two other slots it serves.
  const std::string trigger_key = "sluice:{co-trigger}:t";
  auto owner = cluster->PrimaryForSlot(redis::KeySlot(trigger_key));
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  std::vector<std::string> tags;
  std::vector<int> slots;
  for (int n = 0; n < 100000 && tags.size() < 2; ++n) {
    const std::string tag = "co" + std::to_string(n);
    const int slot = redis::KeySlot("{" + tag + "}");
    auto node = cluster->PrimaryForSlot(slot);
    ASSERT_TRUE(node.ok());
    if (*node != *owner || slot == redis::KeySlot(trigger_key)) continue;
    if (!slots.empty() && slots[0] == slot) continue;
    tags.push_back(tag);
    slots.push_back(slot);
  }
  ASSERT_EQ(tags.size(), 2u);

  const Policy p = Policy::FixedWindow("fw", 10, std::chrono::hours(1));
  const Policy trigger = Policy::FixedWindow("t", 1000, std::chrono::hours(1));
  // Eight callers per slot (enough to be merged), interleaved in the queue, each on a
  // key of its own.
  constexpr int kCallers = 16;
  std::vector<std::string> keys;
  for (int i = 0; i < kCallers; ++i) {
    keys.push_back("sluice:{" + tags[i % 2] + "}:k" + std::to_string(i));
  }
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Status> status = std::vector<Status>(kCallers);
    std::vector<Decision> decision = std::vector<Decision>(kCallers);
    int answered = 0;
  };
  auto shared = std::make_shared<Shared>();
  const auto before = store.Stats();
  const StoreCheck t{.policy = &trigger, .key = trigger_key, .cost = 0};
  store.RunAsync({.checks = std::span<const StoreCheck>(&t, 1), .now = 0},
                 [&](const Status& s, std::span<const Decision>) {
                   EXPECT_TRUE(s.ok()) << s.ToString();
                   for (int i = 0; i < kCallers; ++i) {
                     const StoreCheck c{.policy = &p, .key = keys[i], .cost = 1};
                     store.RunAsync({.checks = std::span<const StoreCheck>(&c, 1), .now = 0},
                                    [shared, i](const Status& st, std::span<const Decision> d) {
                                      std::lock_guard<std::mutex> lock(shared->mu);
                                      shared->status[i] = st;
                                      if (d.size() == 1) shared->decision[i] = d[0];
                                      ++shared->answered;
                                      shared->cv.notify_all();
                                    });
                   }
                 });
  {
    std::unique_lock<std::mutex> lock(shared->mu);
    ASSERT_TRUE(shared->cv.wait_for(lock, std::chrono::seconds(60),
                                    [&] { return shared->answered == kCallers; }));
  }
  for (int i = 0; i < kCallers; ++i) {
    ASSERT_TRUE(shared->status[i].ok()) << i << ": " << shared->status[i].ToString();
    EXPECT_TRUE(shared->decision[i].allowed) << i;
    EXPECT_EQ(shared->decision[i].remaining, 9u) << i;
  }
  // One merged call per slot, eight callers each; nothing was redirected.
  const auto after = store.Stats();
  EXPECT_EQ(after.coalesced_calls - before.coalesced_calls, 2u);
  EXPECT_EQ(after.coalesced_evaluations - before.coalesced_evaluations, 16u);
  EXPECT_EQ(after.moved, before.moved);
  for (const std::string& k : keys) {
    auto ttl = cluster->node(*owner).Command({"PTTL", k});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << k;
  }
}

}  // namespace
}  // namespace sluice::testing
