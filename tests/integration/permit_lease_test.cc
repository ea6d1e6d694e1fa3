// Concurrency limits on Redis's own clock when the lease changes under the same policy
// name (issue #20 item 1): a shorter lease never drops permits held under a longer one.
// The key's TTL covers the longest-held permit on acquire and on extend, and every read
// trims expired permits by score. The embedded store's half is the same scenario
// (tests/unit): A (lease 60 s), B (lease 1 s), past B's expiry: C allowed, D denied.
// Compiled into sluice_redis_tests (one redis-server) and, with SLUICE_TESTS_ON_CLUSTER,
// into sluice_cluster_store_tests (the 6-node cluster).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "sluice/key.h"
#include "sluice/permit.h"
#include "store_backends.h"
#include "wait.h"

namespace sluice::testing {
namespace {

using std::chrono::seconds;

// Sends `args` to the node that holds `key`.
Result<redis::Reply> CommandFor([[maybe_unused]] const std::string& key,
                                const std::vector<std::string>& args) {
#ifdef SLUICE_TESTS_ON_CLUSTER
  RedisCluster* cluster = SharedCluster();
  if (cluster == nullptr) return Status::Unavailable("no cluster");
  auto slot = cluster->KeySlot(key);
  if (!slot.ok()) return slot.status();
  auto node = cluster->PrimaryForSlot(*slot);
  if (!node.ok()) return node.status();
  return cluster->Command(*node, args);
#else
  RedisServer* server = SharedRedis();
  if (server == nullptr) return Status::Unavailable("no redis-server");
  return server->Command(args);
#endif
}

// Redis's clock (TIME) on the node that holds `key`, in microseconds; -1 on error.
Micros RedisNow(const std::string& key) {
  auto t = CommandFor(key, {"TIME"});
  if (!t.ok() || t->elements.size() != 2) return -1;
  return std::stoll(t->elements[0].str) * 1'000'000 + std::stoll(t->elements[1].str);
}

long long Integer(const std::string& key, const std::vector<std::string>& args) {
  auto r = CommandFor(key, args);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->integer : -100;
}

class PermitLease : public ::testing::Test {
 protected:
  void SetUp() override {
    auto url = FlushedRedisUrl();
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    RedisStoreOptions o;
    o.url = *url;
    o.use_caller_time = false;  // Redis's clock and Redis's own expiry: the bug's ground
    o.call_timeout = kPatientCallTimeout;
    o.connect_timeout = 10'000'000;
    o.on_warning = [](std::string_view) {};
    auto store = RedisStore::Create(std::move(o));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = *store;
    ASSERT_TRUE(ValidatePolicy(long_).ok());
    ASSERT_TRUE(ValidatePolicy(short_).ok());
    key_ = *StoreKey("lease-change", "user", "pc");
  }

  Decision Run(StoreOp op, const Policy& p, const std::string& id) {
    const StoreCheck check{.policy = &p, .key = key_, .cost = 1, .permit = id};
    Decision d;
    const Status s = store_->Run({.op = op, .checks = {&check, 1}}, {&d, 1});
    EXPECT_TRUE(s.ok()) << s.ToString();
    return d;
  }

  // Waits, on Redis's clock, until the permit `id` has expired by its score, and a
  // TTL set from that score (rounded up to the ms) would have run out too.
  void WaitPastExpiryOf(const std::string& id) {
    auto score = CommandFor(key_, {"ZSCORE", key_, id});
    ASSERT_TRUE(score.ok()) << score.status().ToString();
    ASSERT_FALSE(score->str.empty()) << "permit " << id << " is not held";
    const Micros expires = std::stoll(score->str);
    EXPECT_TRUE(WaitUntil([&] { return RedisNow(key_) > expires + 2'000; }))
        << "Redis's clock never passed the permit's expiry";
  }

  // Past B's expiry (the shorter lease): A still holds its slot, so one more permit
  // passes and the next is denied until the first lease ends (C's, 1 s); the limit is
  // fully available again only when A's 60 s lease ends.
  void ExpectOneSlotLeft() {
    EXPECT_TRUE(Run(StoreOp::kDecide, short_, kC).allowed) << "C";
    const Decision d = Run(StoreOp::kDecide, short_, kD);
    EXPECT_FALSE(d.allowed) << "D: three in flight against a limit of two";
    EXPECT_GT(d.retry_after, 0);
    EXPECT_LE(d.retry_after, 1'000'000) << "D waits for C's 1 s lease, the first to end";
    EXPECT_GT(d.reset_after, 30'000'000) << "everything is free when A's 60 s lease ends";
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(Integer(key_, {"ZCARD", key_}), 2) << "A and C held, B trimmed by score";
    auto b = CommandFor(key_, {"ZSCORE", key_, kB});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->type, REDIS_REPLY_NIL) << "B's expired permit is trimmed";
  }

  // A held under the 60 s lease, B under the 1 s one: the key lives on past B's expiry,
  // with A in it.
  void ExpectAOutlivesB() {
    EXPECT_GT(Integer(key_, {"PTTL", key_}), 30'000) << "the TTL must cover A's 60 s lease";
    WaitPastExpiryOf(kB);
    EXPECT_EQ(Integer(key_, {"EXISTS", key_}), 1) << "A's permit went with B's TTL";
    ExpectOneSlotLeft();
  }

  static constexpr const char* kA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  static constexpr const char* kB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  static constexpr const char* kC = "cccccccccccccccccccccccccccccccc";
  static constexpr const char* kD = "dddddddddddddddddddddddddddddddd";
  Policy long_ = Policy::Concurrency("pc", 2, seconds(60));
  Policy short_ = Policy::Concurrency("pc", 2, seconds(1));
  std::shared_ptr<RedisStore> store_;
  std::string key_;
};

TEST_F(PermitLease, AShorterLeaseOnAcquireKeepsTheLongerPermitsKey) {
  ASSERT_TRUE(Run(StoreOp::kDecide, long_, kA).allowed);
  const Decision b = Run(StoreOp::kDecide, short_, kB);
  ASSERT_TRUE(b.allowed);
  EXPECT_GT(b.reset_after, 30'000'000) << "the limit is fully free only when A's lease ends";
  ExpectAOutlivesB();
}

TEST_F(PermitLease, AShorterLeaseOnExtendKeepsTheLongerPermitsKey) {
  ASSERT_TRUE(Run(StoreOp::kDecide, long_, kA).allowed);
  ASSERT_TRUE(Run(StoreOp::kDecide, long_, kB).allowed);
  ASSERT_TRUE(Run(StoreOp::kExtend, short_, kB).allowed);  // B now ends in 1 s
  ExpectAOutlivesB();
}

TEST_F(PermitLease, TheTtlFollowsTheLongestPermitAndTheKeyStillGoesByItself) {
  // A new key gets its TTL (PEXPIRE GT alone would leave a key without one forever).
  ASSERT_TRUE(Run(StoreOp::kDecide, short_, kA).allowed);
  const long long first = Integer(key_, {"PTTL", key_});
  EXPECT_GT(first, 0);
  EXPECT_LE(first, 1'000);
  // A longer lease raises it, a shorter one after it does not lower it.
  ASSERT_TRUE(Run(StoreOp::kDecide, long_, kB).allowed);
  EXPECT_GT(Integer(key_, {"PTTL", key_}), 30'000);
  ASSERT_TRUE(Run(StoreOp::kRelease, long_, kB).allowed);
  EXPECT_GT(Integer(key_, {"PTTL", key_}), 30'000) << "a TTL may outlive its permits, never less";
  // Once every permit is gone the set is deleted, and a new one starts from its own TTL.
  ASSERT_TRUE(Run(StoreOp::kRelease, short_, kA).allowed);
  EXPECT_EQ(Integer(key_, {"EXISTS", key_}), 0);
  ASSERT_TRUE(Run(StoreOp::kDecide, short_, kC).allowed);
  const long long again = Integer(key_, {"PTTL", key_});
  EXPECT_GT(again, 0);
  EXPECT_LE(again, 1'000);
}

}  // namespace
}  // namespace sluice::testing
