// RedisStore on a Redis Cluster: connecting (URLs, bad seeds), routing across
// primaries, and multi-check requests whose keys span hash slots (reserve per slot,
// refund when one slot denies).
#include <gtest/gtest.h>

#include <chrono>

#include "redis/cluster_slots.h"
#include "shared_cluster.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::hours;

std::shared_ptr<RedisStore> Connect(const std::string& url) {
  RedisStoreOptions o;
  o.url = url;
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  auto s = RedisStore::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

std::unique_ptr<Limiter> MakeLimiter(std::shared_ptr<Store> store, std::vector<Policy> policies) {
  LimiterOptions o;
  o.policies = std::move(policies);
  o.store = std::move(store);
  o.deny_cache = false;
  o.key_prefix = "xs";
  auto l = Limiter::Create(std::move(o));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::move(*l) : nullptr;
}

// Two caller keys whose store keys (under `policy`) live in different slots of
// different primaries.
std::pair<std::string, std::string> KeysOnTwoPrimaries(RedisCluster& c, const std::string& policy) {
  std::string first;
  std::size_t first_node = 0;
  for (int n = 0; n < 100000; ++n) {
    const std::string caller = "caller" + std::to_string(n);
    const int slot = redis::KeySlot(*StoreKey("xs", caller, policy));
    auto node = c.PrimaryForSlot(slot);
    if (!node.ok()) continue;
    if (first.empty()) {
      first = caller;
      first_node = *node;
    } else if (*node != first_node) {
      return {first, caller};
    }
  }
  ADD_FAILURE() << "no two keys on two primaries";
  return {};
}

TEST(ClusterStore, DecidesOnEveryPrimaryFromAnySeed) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  // A single seed is enough: the rest of the cluster is discovered.
  auto store = Connect(c->SeedUrl(c->size() - 1));
  ASSERT_NE(store, nullptr);
  auto l = MakeLimiter(store, {Policy::FixedWindow("fw", 2, hours(1))});
  ASSERT_NE(l, nullptr);
  for (int i = 0; i < 300; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_TRUE(l->Acquire(key)->allowed);
    EXPECT_TRUE(l->Acquire(key)->allowed);
    auto third = l->Acquire(key);
    ASSERT_TRUE(third.ok());
    EXPECT_FALSE(third->allowed);
    EXPECT_EQ(third->source, DecisionSource::kStore);
  }
  // Every primary holds some of the 300 keys.
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  for (std::size_t p : *primaries) {
    auto size = c->Command(p, {"DBSIZE"});
    ASSERT_TRUE(size.ok());
    EXPECT_GT(size->integer, 30) << "primary " << p;
  }
  EXPECT_EQ(store->Stats().errors, 0u);
}

// The one request whose checks span slots: one slot denies, so the others must be
// left as they were (refunded), for every algorithm.
TEST(ClusterStore, CrossSlotRequestDeniedBySlotLeavesTheOthersUnchanged) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  auto store = Connect(c->Url());
  ASSERT_NE(store, nullptr);
  const std::vector<Policy> all = {
      Policy::FixedWindow("fw", 3, hours(1)), Policy::SlidingWindowLog("log", 3, hours(1)),
      Policy::SlidingWindowCounter("swc", 3, hours(1)), Policy::TokenBucket("tb", 3, 3, hours(1)),
      Policy::Gcra("gcra", 3, hours(1), 3)};
  auto l = MakeLimiter(store, all);
  ASSERT_NE(l, nullptr);
  for (std::size_t p = 0; p < all.size(); ++p) {
    SCOPED_TRACE(all[p].name);
    auto [a, b] = KeysOnTwoPrimaries(*c, all[p].name);
    ASSERT_NE(redis::KeySlot(*StoreKey("xs", a, all[p].name)),
              redis::KeySlot(*StoreKey("xs", b, all[p].name)));
    // b is exhausted; a has taken 1 of 3.
    const Check b_all{p, b, 3};
    ASSERT_TRUE(l->Acquire(std::span<const Check>(&b_all, 1))->allowed);
    const Check a_one{p, a, 1};
    ASSERT_TRUE(l->Acquire(std::span<const Check>(&a_one, 1))->allowed);
    const auto before = store->Stats().cross_slot_refunds;

    // Both at once: b's slot denies, so a's reservation is given back.
    const Check both[] = {{p, a, 2}, {p, b, 1}};
    Decision per[2];
    auto d = l->Acquire(both, per);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->source, DecisionSource::kStore);
    EXPECT_FALSE(d->allowed);
    EXPECT_TRUE(per[0].allowed) << "a's slot alone would have allowed";
    EXPECT_FALSE(per[1].allowed);
    EXPECT_EQ(store->Stats().cross_slot_refunds, before + 1);

    // a is unchanged: exactly 2 more, then denied.
    const Check a_two{p, a, 2};
    auto after = l->Acquire(std::span<const Check>(&a_two, 1));
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(after->allowed) << "the refund must have given a's 2 units back";
    auto over = l->Acquire(std::span<const Check>(&a_one, 1));
    ASSERT_TRUE(over.ok());
    EXPECT_FALSE(over->allowed) << "the refund must not give back more than it took";
  }
}

TEST(ClusterStore, CrossSlotRequestAllowedConsumesEverySlot) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  auto store = Connect(c->Url());
  ASSERT_NE(store, nullptr);
  auto l = MakeLimiter(store, {Policy::FixedWindow("fw", 2, hours(1))});
  ASSERT_NE(l, nullptr);
  auto [a, b] = KeysOnTwoPrimaries(*c, "fw");
  const Check both[] = {{0, a, 1}, {0, b, 1}};
  EXPECT_TRUE(l->Acquire(both)->allowed);
  EXPECT_TRUE(l->Acquire(both)->allowed);
  EXPECT_FALSE(l->Acquire(both)->allowed);
  EXPECT_FALSE(l->Acquire(a)->allowed);
  EXPECT_FALSE(l->Acquire(b)->allowed);
  // A refund across slots gives each key its unit back.
  ASSERT_TRUE(l->Refund(both).ok());
  EXPECT_TRUE(l->Acquire(a)->allowed);
  EXPECT_TRUE(l->Acquire(b)->allowed);
}

// A reservation (StoreCheck::max_wait) whose keys span slots keeps its max_wait in each
// slot's part: both GCRA keys are empty after one request each, so the second request
// of each can only pass by waiting for its slot, which a plain decision (max_wait lost
// on the way to a slot) would deny.
TEST(ClusterStore, CrossSlotReservationWaitsInEverySlot) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  auto store = Connect(c->Url());
  ASSERT_NE(store, nullptr);
  // 1 per hour, burst 1: a second request waits about an hour.
  auto l = MakeLimiter(store, {Policy::Gcra("g", 1, hours(1), 1)});
  ASSERT_NE(l, nullptr);
  auto [a, b] = KeysOnTwoPrimaries(*c, "g");
  const Check both[] = {{0, a, 1}, {0, b, 1}};
  const Micros an_hour = 3600 * 1'000'000LL;  // the most a reservation may wait here
  auto first = l->Reserve(both, an_hour);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->decision().allowed);
  EXPECT_EQ(first->decision().wait, 0);
  Decision per[2];
  auto second = l->Reserve(both, an_hour, per);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(second->decision().allowed) << "each slot must have received max_wait";
  for (const Decision& d : per) {
    EXPECT_GT(d.wait, 3000 * 1'000'000LL);
    EXPECT_LE(d.wait, 3600 * 1'000'000LL);
  }
}

TEST(ClusterStore, SeedThatIsNotAClusterNodeIsAClearError) {
  auto plain = RedisServer::Start();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  RedisStoreOptions o;
  o.url = "redis-cluster://127.0.0.1:" + std::to_string((*plain)->port());
  o.on_warning = [](std::string_view) {};
  const auto start = std::chrono::steady_clock::now();
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().message().find("not a Redis Cluster node"), std::string::npos)
      << s.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::microseconds(o.connect_timeout) * 4);
}

TEST(ClusterStore, UnreachableSeedsAreAClearError) {
  auto plain = RedisServer::Start();
  ASSERT_TRUE(plain.ok());
  const int port = (*plain)->port();
  (*plain)->Stop();  // nothing listens there now
  RedisStoreOptions o;
  o.url = "redis-cluster://127.0.0.1:" + std::to_string(port);
  auto s = RedisStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnavailable) << s.status().ToString();
  EXPECT_NE(s.status().message().find(std::to_string(port)), std::string::npos)
      << s.status().ToString();
}

TEST(ClusterStore, MaxmemoryPolicyIsCheckedOnEveryPrimary) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  const std::size_t p = (*primaries)[1];
  ASSERT_TRUE(c->Command(p, {"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}).ok());
  ASSERT_TRUE(c->Command(p, {"CONFIG", "SET", "maxmemory", "100mb"}).ok());
  std::vector<std::string> warnings;
  RedisStoreOptions o;
  o.url = c->Url();
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  auto s = RedisStore::Create(o);
  ASSERT_TRUE(c->Command(p, {"CONFIG", "SET", "maxmemory-policy", "noeviction"}).ok());
  ASSERT_TRUE(c->Command(p, {"CONFIG", "SET", "maxmemory", "0"}).ok());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(std::to_string(c->node(p).port())), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace sluice::testing
