// The Rate Limit Quota Service on every store (issue #23 item 1): the embedded store, a
// real redis-server and a real Redis Cluster (tests/support). Sessions of two sluiced
// engines (one, on the embedded store, which no other process shares) take their slices
// of one global limit from the store until it denies, and unused units given back reach
// the store, where the next slice finds them. The engines' clock is a manual one (the
// sessions' TTLs and refunds); the stores decide on their own clock (Redis: TIME), in an
// hour window that a test run does not cross.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "redis_cluster.h"
#include "redis_server.h"
#include "rlqs_testing.h"
#include "service/config.h"
#include "service/engine.h"
#include "service/rlqs_session.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "wait.h"

namespace sluice::service {
namespace {

// 40 an hour in slices of 10 (a 10 s TTL).
constexpr const char* kConfig = R"(sluiced:
  rlqs: {slice: 0.25, assignment_ttl: 10s}
domain: edge
descriptors:
  - key: name
    value: api
    rate_limit: {unit: hour, requests_per_unit: 40}
)";

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<Store> store,
                                   std::shared_ptr<const Clock> clock) {
  auto c = ParseConfig(kConfig, "rlqs.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return nullptr;
  auto e = Engine::Create(*c, Engine::Options{std::move(store), std::move(clock)});
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(*e) : nullptr;
}

// One report of {name: api} with `allowed` requests on `s`; its actions, once the
// decisions (maybe on the store's thread) are done.
Response Report(RlqsSession& s, int allowed) {
  Reports r;
  r.set_domain("edge");
  auto* u = r.add_bucket_quota_usages();
  (*u->mutable_bucket_id()->mutable_bucket())["name"] = "api";
  u->set_num_requests_allowed(allowed);
  u->mutable_time_elapsed()->set_seconds(1);
  std::promise<Response> done;
  auto got = done.get_future();
  s.Handle(r, [&](const Status& st, Response& out) {
    EXPECT_TRUE(st.ok()) << st.message();
    done.set_value(out);
  });
  EXPECT_EQ(got.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  return got.get();
}

// Units the one action of `r` admits in one TTL (max_tokens + tokens_per_fill), 0 for
// DENY_ALL, -1 for anything else.
long Units(const Response& r) {
  if (r.bucket_action_size() != 1) return -1;
  const auto& s = r.bucket_action(0).quota_assignment_action().rate_limit_strategy();
  if (s.has_token_bucket())
    return s.token_bucket().max_tokens() + s.token_bucket().tokens_per_fill().value();
  return s.blanket_rule() == envoy::type::v3::RateLimitStrategy::DENY_ALL ? 0 : -1;
}

// Four streams, alternating between engines `a` and `b`, take 10 units each: the whole
// limit. A fifth is denied. Then one stream's assignment ends unspent: its 10 units go
// back to the store, the stream's next slice (5, its demand being nil) comes out of them,
// and 5 are left.
void SharedLimitAndRefunds(Engine& a, Engine& b, ManualClock& clock) {
  std::vector<std::unique_ptr<RlqsSession>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<RlqsSession>(i % 2 == 0 ? a : b));
    EXPECT_EQ(Units(Report(*streams.back(), 0)), 10) << "stream " << i;
  }
  RlqsSession fifth(b);
  EXPECT_EQ(Units(Report(fifth, 0)), 0) << "the limit is used up: DENY_ALL";
  clock.Advance(11 * kSec);
  EXPECT_EQ(Units(Report(*streams[0], 0)), 5);
  EXPECT_TRUE(sluice::testing::WaitUntil([&] {
    return a.metrics().rlqs().refunded_units.load() == 10;
  })) << "refunded: "
      << a.metrics().rlqs().refunded_units.load();
  EXPECT_EQ(StoreLeft(b, 40), 5);
}

TEST(RlqsStores, EmbeddedStore) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto e = MakeEngine(std::make_shared<MemoryStore>(), clock);
  ASSERT_NE(e, nullptr);
  SharedLimitAndRefunds(*e, *e, *clock);
}

// Two engines (two sluiced), each with its own connection to the Redis at `url`.
void TwoEnginesOn(const std::string& url) {
  auto clock = std::make_shared<ManualClock>(kNoon);
  auto s1 = testing::OpenPatientStore(url);
  auto s2 = testing::OpenPatientStore(url);
  ASSERT_TRUE(s1.ok() && s2.ok()) << s1.status().ToString() << s2.status().ToString();
  auto a = MakeEngine(*s1, clock);
  auto b = MakeEngine(*s2, clock);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  SharedLimitAndRefunds(*a, *b, *clock);
}

TEST(RlqsStores, TwoEnginesOnOneRedis) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  TwoEnginesOn((*redis)->Url());
}

TEST(RlqsStores, TwoEnginesOnOneRedisCluster) {
  auto cluster = testing::RedisCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  TwoEnginesOn((*cluster)->Url());
}

}  // namespace
}  // namespace sluice::service
