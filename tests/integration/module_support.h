// Shared by the native module's tests (module_test.cc, module_store_test.cc,
// module_command_test.cc): redis-servers started with the module loaded (SLUICE_REDIS_MODULE),
// on Redis 7.0 and on Valkey 8 (OnServer), random policies and steps, and what the
// tests compare (decisions, key contents, TTLs, replication).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "random_policy.h"
#include "redis_server.h"
#include "sluice/redis_store.h"
#include "store_backends.h"
#include "wait.h"

namespace sluice::testing {

// `binary` (redis-server or valkey-server) with the module loaded.
inline Result<std::unique_ptr<RedisServer>> StartServerWithModule(
    const std::string& binary, std::vector<std::string> extra = {}) {
  RedisServerOptions o;
  o.binary = binary;
  o.args = {"--loadmodule", SLUICE_REDIS_MODULE};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return RedisServer::Start(std::move(o));
}

// The servers the module's tests run on, each test once on each (the cluster and
// sentinel tests below: Redis only): Debian 12's Redis 7.0 and Valkey 8 (from
// bookworm-backports, unpacked by scripts/deps.sh). A server that is missing fails its
// tests, as it does everywhere.
class OnServer : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& Binary() const { return GetParam(); }
  // The server with the module loaded; it must say it is the one asked for (Valkey's
  // INFO has a valkey_version, Redis's none).
  Result<std::unique_ptr<RedisServer>> StartWithModule(std::vector<std::string> extra = {}) const {
    auto server = StartServerWithModule(GetParam(), std::move(extra));
    if (server.ok()) {
      auto info = (*server)->Command({"INFO", "server"});
      EXPECT_TRUE(info.ok());
      if (info.ok()) {
        EXPECT_EQ(info->str.find("valkey_version:") != std::string::npos,
                  GetParam() == "valkey-server")
            << GetParam() << ": " << info->str.substr(0, 200);
      }
    }
    return server;
  }
};

inline std::string ServerName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "valkey-server" ? "Valkey" : "Redis";
}

inline const auto kEveryServer =
    ::testing::Values(std::string("redis-server"), std::string("valkey-server"));

inline std::shared_ptr<RedisStore> Open(const std::string& url, bool caller_time = true) {
  auto s = RedisStore::Create(
      {.url = url, .call_timeout = kPatientCallTimeout, .use_caller_time = caller_time});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

// The module tests' random policies: every rate algorithm, the sliding log with limits
// above its inline form's 8 entries too (its sorted set, the spill into it, and the
// denials that search it), a third with a block, a third with on_change, a quarter
// whose denials are charged (Policy::overage).
inline constexpr Micros kModuleWindows[] = {1'000,     7'000,      250'000,
                                            1'000'000, 60'000'000, 3'600'000'000};
inline constexpr std::uint64_t kModuleLimits[] = {1, 2, 3, 5, 10, 17, 100, 1000};
inline Policy RandomPolicy(std::mt19937_64& rng, int index) {
  return RandomPolicy(rng, index,
                      {.windows = kModuleWindows,
                       .limits = kModuleLimits,
                       .block_one_in = 3,
                       .on_change_one_in = 3,
                       .overage_one_in = 4,
                       .debt_capacities = 3});
}

// Four versions of one policy, as reloads would make them (`base` first): the same
// algorithm and name, other limits, bursts, windows and on_change modes, one key
// space (Policy::on_change decides what a state recorded under another version is).
inline std::vector<Policy> Versions(std::mt19937_64& rng, const Policy& base) {
  static const std::uint64_t kLimits[] = {1, 2, 3, 5, 10, 17, 100};
  static const OnChange kModes[] = {OnChange::kAsIs, OnChange::kReset, OnChange::kProportional};
  std::vector<Policy> out = {base};
  for (int i = 1; i < 4; ++i) {
    Policy v = base;
    v.limit = kLimits[rng() % std::size(kLimits)];
    if (rng() % 3 == 0) v.window = base.window * 2;
    v.burst = 0;
    v.initial_tokens.reset();
    if ((v.algorithm == Algorithm::kTokenBucket || v.algorithm == Algorithm::kGcra) && rng() % 2) {
      v.burst = v.limit + rng() % (2 * v.limit + 1);
    }
    v.on_change = kModes[rng() % std::size(kModes)];
    if (v.algorithm == Algorithm::kSlidingWindowLog) v.on_change = OnChange::kAsIs;
    EXPECT_TRUE(ValidatePolicy(v).ok());
    out.push_back(v);
  }
  return out;
}

inline std::string Describe(const Decision& d) {
  std::ostringstream o;
  o << "allowed=" << d.allowed << " remaining=" << d.remaining << " reset=" << d.reset_after
    << " retry=" << d.retry_after << " wait=" << d.wait << " charged=" << d.charged;
  return o.str();
}

inline bool Same(const Decision& a, const Decision& b) {
  return a.allowed == b.allowed && a.remaining == b.remaining && a.reset_after == b.reset_after &&
         a.retry_after == b.retry_after && a.wait == b.wait && a.limit == b.limit &&
         a.charged == b.charged;
}

// One random step: an operation and 1-3 checks on distinct keys of `keys`.
struct Step {
  StoreOp op = StoreOp::kDecide;
  std::vector<StoreCheck> checks;  // keys unset: see `keys`
  std::vector<int> keys;           // the key of each check: "k<policy * 100 + n>"
  Micros now = 0;
};

// `wide`: the clock may also go back a little, and idle for up to an hour; otherwise
// it only moves forward, by under 0.3 s (against the in-process store, which raises its
// clock to the latest time it saw, and forgets a state when it is full again, where
// Redis keeps a key for its TTL padded by an hour of ITS clock in caller-time mode: a
// fixed window's counter more than 2^19 windows old would read as a later window's).
inline Step RandomStep(std::mt19937_64& rng, const std::vector<Policy>& policies, Micros* now,
                       bool wide) {
  Step s;
  switch (rng() % 10) {
    case 0:
      if (wide) *now -= static_cast<Micros>(rng() % 5'000);
      break;
    case 1:
      if (wide) *now += static_cast<Micros>(rng() % 4'000'000'000ULL);  // a long idle gap
      break;
    default:
      *now += static_cast<Micros>(rng() % 300'000);
  }
  s.now = *now;
  const int kind = static_cast<int>(rng() % 10);
  s.op = kind == 0 ? StoreOp::kRefund : kind == 1 ? StoreOp::kPenalize : StoreOp::kDecide;
  const std::size_t n = 1 + rng() % 3;
  std::vector<int> keys = {0, 1, 2, 3, 4, 5};
  std::shuffle(keys.begin(), keys.end(), rng);
  for (std::size_t i = 0; i < n; ++i) {
    // (a key is one policy's: the Limiter names keys by policy)
    const std::size_t pi = rng() % policies.size();
    const Policy& p = policies[pi];
    StoreCheck c;
    c.policy = &p;
    const std::uint64_t cap = p.Capacity();
    c.cost = rng() % 6 == 0 ? 0 : rng() % 4 == 0 ? 1 + rng() % cap : 1;
    // (under an overage a decision may report more than the capacity: denied, charged)
    if (p.overage != Overage::kReject && s.op == StoreOp::kDecide && rng() % 8 == 0) {
      c.cost = cap + 1 + rng() % (2 * cap);
    }
    if (s.op != StoreOp::kDecide && c.cost == 0) c.cost = 1;
    if (s.op == StoreOp::kDecide && p.overage == Overage::kReject && rng() % 5 == 0) {
      c.max_wait = rng() % (p.window + 1);  // (a reservation that waits needs reject)
    }
    s.keys.push_back(static_cast<int>(pi) * 100 + keys[i]);
    s.checks.push_back(c);
  }
  return s;
}

// The checks of `s` on keys prefixed with `prefix` (`storage` keeps the keys).
inline std::vector<StoreCheck> Prefixed(const Step& s, const std::string& prefix,
                                        std::vector<std::string>* storage) {
  storage->clear();
  storage->reserve(s.checks.size());
  std::vector<StoreCheck> out = s.checks;
  for (std::size_t i = 0; i < out.size(); ++i) {
    storage->push_back(prefix + "k" + std::to_string(s.keys[i]));
    out[i].key = storage->back();
  }
  return out;
}

inline Status RunOn(Store& store, StoreOp op, std::span<const StoreCheck> checks, Micros now,
                    Decision* out) {
  const std::size_t n = op == StoreOp::kRefund ? 0 : checks.size();
  return store.Run({.op = op, .checks = checks, .now = now}, std::span<Decision>(out, n));
}

// Every key on `server` has a TTL.
inline void ExpectEveryKeyHasTtl(const RedisServer& server) {
  auto keys = server.Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok());
  for (const redis::Reply& k : keys->elements) {
    auto ttl = server.Command({"PTTL", k.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << "key " << k.str << " has no TTL";
  }
}

// What `key` holds, whatever its type (a sliding log's ":log" key is a sorted set: its
// members and scores in order), with the type first ("none" when there is no key).
inline std::string Contents(const RedisServer& server, const std::string& key) {
  auto type = server.Command({"TYPE", key});
  EXPECT_TRUE(type.ok());
  if (!type.ok()) return "";
  std::string out = type->str;
  if (type->str == "zset") {
    auto z = server.Command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    EXPECT_TRUE(z.ok());
    for (const redis::Reply& e : z.ok() ? z->elements : std::vector<redis::Reply>{}) {
      out += "|" + e.str;
    }
  } else if (type->str == "string") {
    out += "|" + server.Command({"GET", key})->str;
  }
  return out;
}

// Waits until `replica` has applied everything `primary` has written so far (WAIT would
// count only the writes of its own connection).
inline void WaitReplicated(const RedisServer& primary, const RedisServer& replica) {
  auto offset = [](const RedisServer& server, const std::string& field) {
    auto info = server.Command({"INFO", "replication"});
    if (!info.ok()) return -1LL;
    const std::size_t at = info->str.find(field + ":");
    return at == std::string::npos ? -1LL : std::stoll(info->str.substr(at + field.size() + 1));
  };
  const long long written = offset(primary, "master_repl_offset");
  ASSERT_GT(written, 0);
  ASSERT_TRUE(WaitUntil([&] { return offset(replica, "slave_repl_offset") >= written; },
                        std::chrono::seconds(60)));
}

}  // namespace sluice::testing
