// One call, one redirect, set up deterministically on the shared cluster: ASK (the
// key's slot MIGRATING on its primary and IMPORTING on another: the key is not on the
// source, so it answers ASK), MOVED (the slot then assigned to the other primary with
// CLUSTER SETSLOT ... NODE while the store's map still names the old one), and a
// demoted primary (CLUSTER FAILOVER, then one call on the connections the store still
// has to the old primary). Each is followed inside the call, counted in the store's
// stats, and no error reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "redis/cluster_slots.h"
#include "shared_cluster.h"
#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using std::chrono::hours;

struct Client {
  std::shared_ptr<RedisStore> store;
  std::unique_ptr<Limiter> limiter;
};

Client Open(RedisCluster& c) {
  Client s;
  RedisStoreOptions o;
  o.url = c.Url();
  o.call_timeout = kPatientCallTimeout;
  o.on_warning = [](std::string_view) {};
  auto store = RedisStore::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return s;
  s.store = *store;
  LimiterOptions lo;
  lo.policies = {Policy::FixedWindow("fw", 5, hours(1))};
  lo.store = s.store;
  lo.deny_cache = false;
  lo.key_prefix = "rd";
  auto l = Limiter::Create(std::move(lo));
  EXPECT_TRUE(l.ok());
  if (l.ok()) s.limiter = std::move(*l);
  return s;
}

std::string IdOf(RedisCluster& c, std::size_t node) {
  auto nodes = c.Nodes();
  return nodes.ok() ? (*nodes)[node].id : "";
}

Status SetSlot(RedisCluster& c, std::size_t node, const std::vector<std::string>& args) {
  auto r = c.Command(node, args);
  if (!r.ok()) return r.status();
  if (r->is_error()) return Status::Internal(args[0] + " " + args[1] + ": " + r->str);
  return Status::Ok();
}

// The slot's keys are the test's own: flushed, then the slot is handed from `from` to
// `to` by the migration protocol (IMPORTING on `to`, MIGRATING on `from`, then NODE on
// `to` first, which bumps its epoch, and on every other primary).
Status MoveEmptySlot(RedisCluster& c, int slot, std::size_t from, std::size_t to) {
  const std::string s = std::to_string(slot);
  if (Status st = c.FlushAll(); !st.ok()) return st;
  if (Status st = SetSlot(c, to, {"CLUSTER", "SETSLOT", s, "IMPORTING", IdOf(c, from)}); !st.ok()) {
    return st;
  }
  if (Status st = SetSlot(c, from, {"CLUSTER", "SETSLOT", s, "MIGRATING", IdOf(c, to)}); !st.ok()) {
    return st;
  }
  if (Status st = SetSlot(c, to, {"CLUSTER", "SETSLOT", s, "NODE", IdOf(c, to)}); !st.ok())
    return st;
  auto primaries = c.Primaries();
  if (!primaries.ok()) return primaries.status();
  for (std::size_t p : *primaries) {
    if (p == to) continue;
    if (Status st = SetSlot(c, p, {"CLUSTER", "SETSLOT", s, "NODE", IdOf(c, to)}); !st.ok())
      return st;
  }
  return c.WaitHealthy();
}

long long KeysInSlot(RedisCluster& c, std::size_t node, int slot) {
  auto r = c.Command(node, {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
  return r.ok() && !r->is_error() ? r->integer : -1;
}

TEST(ClusterRedirects, AskThenMovedAreFollowedInOneCallEachAndCounted) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  Client s = Open(*c);
  ASSERT_NE(s.limiter, nullptr);
  const std::string key = "ask-moved";
  const int slot = redis::KeySlot(*StoreKey("rd", key, "fw"));
  auto source = c->PrimaryForSlot(slot);
  ASSERT_TRUE(source.ok());
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  const std::size_t target = (*primaries)[0] == *source ? (*primaries)[1] : (*primaries)[0];
  const std::string sl = std::to_string(slot);
  // Whatever happens below, the slot goes back to its primary for the other tests.
  struct Restore {
    RedisCluster* c;
    int slot;
    std::size_t source, target;
    ~Restore() {
      for (std::size_t p : {source, target}) {
        c->Command(p, {"CLUSTER", "SETSLOT", std::to_string(slot), "STABLE"});
      }
      auto owner = c->PrimaryForSlot(slot);
      if (owner.ok() && *owner != source) {
        EXPECT_TRUE(MoveEmptySlot(*c, slot, *owner, source).ok());
      }
      EXPECT_TRUE(c->WaitHealthy().ok());
    }
  } restore{c, slot, *source, target};

  // ASK: the slot is migrating to `target` and the key is not on `source`.
  ASSERT_TRUE(SetSlot(*c, target, {"CLUSTER", "SETSLOT", sl, "IMPORTING", IdOf(*c, *source)}).ok());
  ASSERT_TRUE(SetSlot(*c, *source, {"CLUSTER", "SETSLOT", sl, "MIGRATING", IdOf(*c, target)}).ok());
  const RedisStoreStats before = s.store->Stats();
  auto d = s.limiter->Acquire(key);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_EQ(d->remaining, 4u);
  const RedisStoreStats after_ask = s.store->Stats();
  EXPECT_EQ(after_ask.ask, before.ask + 1);
  EXPECT_EQ(after_ask.moved, before.moved);
  EXPECT_EQ(after_ask.errors, before.errors);
  EXPECT_EQ(KeysInSlot(*c, target, slot), 1) << "ASK: the script ran on the importing node";
  EXPECT_EQ(KeysInSlot(*c, *source, slot), 0);

  // MOVED: the slot now belongs to `target`; the store's map still says `source`.
  ASSERT_TRUE(SetSlot(*c, target, {"CLUSTER", "SETSLOT", sl, "NODE", IdOf(*c, target)}).ok());
  for (std::size_t p : *primaries) {
    if (p == target) continue;
    ASSERT_TRUE(SetSlot(*c, p, {"CLUSTER", "SETSLOT", sl, "NODE", IdOf(*c, target)}).ok());
  }
  ASSERT_TRUE(c->WaitHealthy().ok());
  auto moved = s.limiter->Acquire(key);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->source, DecisionSource::kStore);
  EXPECT_EQ(moved->remaining, 3u) << "the second unit of the state the ASK call wrote";
  const RedisStoreStats after_moved = s.store->Stats();
  EXPECT_EQ(after_moved.moved, after_ask.moved + 1);
  EXPECT_EQ(after_moved.ask, after_ask.ask);
  EXPECT_EQ(after_moved.errors, before.errors);
}

// A primary demoted under the store's open connections. Redis 7 answers a keyed
// EVALSHA on a cluster replica with MOVED to its primary (READONLY only comes from a
// replica that serves the slot itself, which a cluster node never does for a script
// with keys, unless the connection sent READONLY, which sluice never does), so the
// demotion is followed as a MOVED: one call, no error.
TEST(ClusterRedirects, ADemotedPrimaryIsFollowedInOneCall) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  Client s = Open(*c);
  ASSERT_NE(s.limiter, nullptr);
  const std::string key = "demoted";
  const int slot = redis::KeySlot(*StoreKey("rd", key, "fw"));
  auto old_primary = c->PrimaryForSlot(slot);
  ASSERT_TRUE(old_primary.ok());
  auto nodes = c->Nodes();
  ASSERT_TRUE(nodes.ok());
  std::size_t replica = nodes->size();
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    if ((*nodes)[i].primary_id == (*nodes)[*old_primary].id && c->alive(i)) replica = i;
  }
  ASSERT_LT(replica, nodes->size()) << "the primary has no replica";
  ASSERT_TRUE(s.limiter->Acquire(key)->allowed);
  ASSERT_TRUE(c->Failover(replica).ok());
  ASSERT_EQ(*c->PrimaryForSlot(slot), replica);

  const RedisStoreStats before = s.store->Stats();
  auto d = s.limiter->Acquire(key);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->source, DecisionSource::kStore);
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 3u) << "the state replicated to the promoted replica";
  const RedisStoreStats after = s.store->Stats();
  // The store's connections to the old primary stay open; it is a replica now and
  // answers MOVED to the promoted node. The router had no client for that node (it
  // connects to primaries only): the call waits for the refresh to connect it, inside
  // its deadline (before, it failed at once with "no connection to the cluster primary",
  // and the failure mode decided).
  EXPECT_EQ(after.moved, before.moved + 1);
  EXPECT_EQ(after.errors, before.errors);
}

// The router never frees a node client while the router lives (a node that leaves the
// map keeps its idle client), and its destructor closes every node, whose I/O threads
// and completion queue deliver what is in flight before they are freed. So: destroy
// the store while calls are in flight on every primary, half of them on a slot that
// just moved (each answered MOVED and resent through the router meanwhile). Every
// callback must run exactly once, and all of them before the store's destructor
// returns. Under ThreadSanitizer (label tsan) this also checks the hand-offs.
TEST(ClusterLifetime, DestroyingTheStoreWithCallsInFlightRunsEveryCallbackOnceBeforeItReturns) {
  RedisCluster* c = SharedTestCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->FlushAll().ok());
  const std::string tag = "lifetime";
  const int slot = redis::KeySlot("{" + tag + "}");
  auto source = c->PrimaryForSlot(slot);
  ASSERT_TRUE(source.ok());
  auto primaries = c->Primaries();
  ASSERT_TRUE(primaries.ok());
  const std::size_t target = (*primaries)[0] == *source ? (*primaries)[1] : (*primaries)[0];
  static const Policy policy = Policy::FixedWindow("fw", 1'000'000, hours(1));
  constexpr int kCalls = 400;
  std::vector<std::string> keys;
  for (int i = 0; i < kCalls; ++i) {
    // Even: the moving slot; odd: spread over every primary.
    keys.push_back(i % 2 == 0 ? "lt:{" + tag + "}:" + std::to_string(i)
                              : "lt:{k" + std::to_string(i) + "}:x");
  }
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Client s = Open(*c);
    ASSERT_NE(s.store, nullptr);
    // The store's map now names `source` for the slot; move it (rounds alternate the
    // direction) so the calls on it are answered MOVED.
    const std::size_t from = round % 2 == 0 ? *source : target;
    const std::size_t to = round % 2 == 0 ? target : *source;
    ASSERT_TRUE(MoveEmptySlot(*c, slot, from, to).ok());
    struct Shared {
      std::atomic<int> calls{0}, late{0}, twice{0};
      std::atomic<bool> destroyed{false};
      std::vector<std::atomic<int>> per;
      explicit Shared(int n) : per(static_cast<std::size_t>(n)) {}
    };
    auto shared = std::make_shared<Shared>(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      StoreCheck check{.policy = &policy, .key = keys[static_cast<std::size_t>(i)], .cost = 1};
      s.store->RunAsync({.checks = std::span<const StoreCheck>(&check, 1), .now = 0},
                        [shared, i](const Status&, std::span<const Decision>) {
                          if (shared->destroyed.load()) shared->late.fetch_add(1);
                          if (shared->per[static_cast<std::size_t>(i)].fetch_add(1) > 0) {
                            shared->twice.fetch_add(1);
                          }
                          shared->calls.fetch_add(1);
                        });
    }
    s.limiter.reset();
    s.store.reset();  // the last reference: destroyed here, with calls in flight
    shared->destroyed.store(true);
    EXPECT_EQ(shared->calls.load(), kCalls) << "callbacks missing when the store was gone";
    EXPECT_EQ(shared->late.load(), 0);
    EXPECT_EQ(shared->twice.load(), 0);
  }
  // Back to where it was for the other tests (rounds 1 and 3 moved it back).
  auto owner = c->PrimaryForSlot(slot);
  ASSERT_TRUE(owner.ok());
  EXPECT_EQ(*owner, *source);
}

}  // namespace
}  // namespace sluice::testing
