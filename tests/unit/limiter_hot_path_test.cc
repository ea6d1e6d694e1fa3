// The Limiter's hot path: its store-key builder must give exactly sluice::StoreKey's
// keys (the Redis store and other processes build them that way), and its striped
// counters must add up across threads.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "limiter/limiter_internal.h"
#include "sluice/key.h"
#include "test_util.h"

namespace sluice::testing {
namespace {

using limiter_internal::BuildStoreKey;
using limiter_internal::BuildStoreKeyView;

TEST(LimiterHotPath, BuildStoreKeyMatchesStoreKeyForEveryByte) {
  std::string out;
  for (int b = 0; b < 256; ++b) {
    std::string key = "a";
    key.push_back(static_cast<char>(b));
    key.push_back('z');
    BuildStoreKey(out, "sluice", key, "api");
    EXPECT_EQ(out, StoreKey("sluice", key, "api").value()) << "byte " << b;
  }
}

TEST(LimiterHotPath, BuildStoreKeyMatchesStoreKeyOnRandomKeysReusingTheBuffer) {
  std::mt19937_64 rng(7);
  std::string out;
  std::string view_buf;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t len = 1 + rng() % kMaxKeyBytes;
    std::string key(len, '\0');
    for (char& c : key) {
      // Mostly plain bytes, some that need escaping.
      c = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : static_cast<char>('a' + rng() % 26);
    }
    const std::string prefix = i % 2 ? "p" : "a-much-longer.prefix_0123456789";
    const std::string policy = i % 3 ? "api" : "per-day.limit_7";
    BuildStoreKey(out, prefix, key, policy);
    ASSERT_EQ(out, StoreKey(prefix, key, policy).value()) << i;
    // The view variant, with a buffer that keeps the longest key seen so far.
    ASSERT_EQ(BuildStoreKeyView(view_buf, prefix, key, policy),
              StoreKey(prefix, key, policy).value())
        << i;
  }
}

TEST(LimiterHotPath, StatsCountEveryDecisionFromEveryThread) {
  Harness h({Policy::FixedWindow("p", 1000, std::chrono::minutes(1))});
  std::vector<std::thread> threads;
  for (int t = 0; t < 20; ++t) {
    threads.emplace_back([&h, t] {
      const std::string key = std::string("key-").append(std::to_string(t));
      for (int i = 0; i < 100; ++i) (void)h.limiter->Acquire(key);
    });
  }
  for (auto& t : threads) t.join();
  const LimiterStats s = h.limiter->Stats();
  EXPECT_EQ(s.decisions, 2000u);
  // 100 per key: all allowed.
  EXPECT_EQ(s.denied, 0u);
  for (int i = 0; i < 1001; ++i) (void)h.limiter->Acquire("one");
  EXPECT_EQ(h.limiter->Stats().decisions, 3001u);
  EXPECT_EQ(h.limiter->Stats().denied, 1u);
}

}  // namespace
}  // namespace sluice::testing
