// The admin listener's pieces in process (issue #24): the space-saving top keys (its
// guarantees, fixed memory, threads), the constant-time comparison and the token file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "service/admin_auth.h"
#include "service/admin_top_keys.h"
#include "service/metrics.h"

namespace sluice::service {
namespace {

TEST(TopKeys, SpaceSavingBoundsHoldOnASkewedStream) {
  TopKeys top;
  std::map<std::string, std::uint64_t> truth;
  // Three heavy keys among 5000 that are denied once or twice each.
  std::uint64_t n = 0;
  for (int round = 0; round < 5000; ++round) {
    const std::string cold = "cold-" + std::to_string(round % 2500);
    for (const std::string& k : {std::string("heavy-a"), cold}) {
      top.Record(k, round);
      ++truth[k];
      ++n;
    }
    if (round % 2 == 0) {
      top.Record("heavy-b", round);
      ++truth["heavy-b"];
      ++n;
    }
    if (round % 5 == 0) {
      top.Record("heavy-c", round);
      ++truth["heavy-c"];
      ++n;
    }
  }
  EXPECT_EQ(top.total(), n);
  const auto entries = top.Top();
  ASSERT_EQ(entries.size(), TopKeys::kCounters);
  EXPECT_EQ(entries[0].key, "heavy-a");
  EXPECT_EQ(entries[1].key, "heavy-b");
  EXPECT_EQ(entries[2].key, "heavy-c");
  for (const auto& e : entries) {
    // count - error <= true count <= count, and the error is at most n / k.
    EXPECT_LE(e.count - e.error, truth[e.key]) << e.key;
    EXPECT_GE(e.count, truth[e.key]) << e.key;
    EXPECT_LE(e.error, n / TopKeys::kCounters) << e.key;
  }
  EXPECT_EQ(top.Top(2).size(), 2u);
}

TEST(TopKeys, LongKeysAreKeptApartAndMarked) {
  TopKeys top;
  const std::string a = std::string(200, 'x') + "a", b = std::string(200, 'x') + "b";
  top.Record(a, 1);
  top.Record(b, 2);
  top.Record(b, 3);
  const auto entries = top.Top();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].count, 2u);
  EXPECT_EQ(entries[1].count, 1u);
  EXPECT_TRUE(entries[0].truncated);
  EXPECT_EQ(entries[0].key.size(), TopKeys::kKeyBytes);
  EXPECT_EQ(entries[0].last, 3);
}

TEST(TopKeys, ConcurrentRecordsAreAllCounted) {
  TopKeys top;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&top, t] {
      for (int i = 0; i < 20000; ++i) top.Record(i % 3 == 0 ? "hot" : "t" + std::to_string(t), i);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(top.total(), 80000u);
  const auto entries = top.Top();
  ASSERT_EQ(entries.size(), 5u);
  std::uint64_t sum = 0;
  for (const auto& e : entries) sum += e.count;
  EXPECT_EQ(sum, 80000u);  // 5 keys fit in 16 counters: exact counts
}

TEST(TopKeys, OnePerSeriesMadeOnceAndFreedWithIt) {
  const std::size_t before = TopKeysBytes();
  {
    Metrics m;
    DescriptorCounters* c = m.Descriptor("d", "rule");
    EXPECT_EQ(c->top.load(), nullptr);
    TopKeys& t = TopKeysOf(*c);
    EXPECT_EQ(&TopKeysOf(*c), &t);
    EXPECT_EQ(TopKeysBytes(), before + sizeof(TopKeys));
    t.Record("d:user:x", 1);
    std::string out;
    m.Render(out);
    EXPECT_NE(out.find("sluiced_top_limited_key_denials{domain=\"d\",descriptor=\"rule\",rank="
                       "\"1\",key=\"d:user:x\"} 1"),
              std::string::npos)
        << out;
  }
  EXPECT_EQ(TopKeysBytes(), before);
}

TEST(TopKeys, DescriptorPartOfAStoreKey) {
  EXPECT_EQ(DescriptorPartOf("sluiced:{web%3Auser%3Abob}:fw.3.3600000.0"), "web%3Auser%3Abob");
  EXPECT_EQ(DescriptorPartOf("plain"), "plain");
}

TEST(AdminAuth, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

class TokenFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& text, mode_t mode) {
    path_ = ::testing::TempDir() + "/sluiced_admin_token_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::FILE* f = std::fopen(path_.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    ::chmod(path_.c_str(), mode);
    return path_;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(TokenFile, SeveralTokensEachWithItsId) {
  auto t = AdminTokens::Load(
      Write("# ops\nfirst-token-0123456789\n\n  second-token-0123456789 \n", 0600));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_EQ(t->Match("Bearer first-token-0123456789"), AdminTokens::IdOf("first-token-0123456789"));
  EXPECT_EQ(t->Match("bearer second-token-0123456789"),
            AdminTokens::IdOf("second-token-0123456789"));
  EXPECT_NE(AdminTokens::IdOf("first-token-0123456789"),
            AdminTokens::IdOf("second-token-0123456789"));
  EXPECT_EQ(t->Match("Bearer first-token-012345678"), "");
  EXPECT_EQ(t->Match("Basic first-token-0123456789"), "");
  EXPECT_EQ(t->Match("Bearer "), "");
  EXPECT_EQ(t->Match(""), "");
}

TEST_F(TokenFile, RefusedWhenOthersMayReadOrWriteIt) {
  for (mode_t mode : {0640, 0604, 0620, 0602, 0666}) {
    auto t = AdminTokens::Load(Write("first-token-0123456789\n", mode));
    ASSERT_FALSE(t.ok()) << std::oct << mode;
    char want[8];
    std::snprintf(want, sizeof want, "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(t.status().message().find(path_ + " has mode " + want), std::string::npos)
        << t.status().message();
    EXPECT_NE(t.status().message().find("chmod 600"), std::string::npos);
  }
  EXPECT_TRUE(AdminTokens::Load(Write("first-token-0123456789\n", 0400)).ok());
}

TEST_F(TokenFile, EmptyShortAndMissingFilesAreErrors) {
  auto empty = AdminTokens::Load(Write("# nothing\n\n", 0600));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no token"), std::string::npos);
  auto shortish = AdminTokens::Load(Write("ok-token-0123456789\nshort\n", 0600));
  ASSERT_FALSE(shortish.ok());
  EXPECT_NE(shortish.status().message().find(path_ + ":2: a token needs at least 16 bytes"),
            std::string::npos)
      << shortish.status().message();
  auto missing = AdminTokens::Load("/nonexistent/sluiced/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/sluiced/token"), std::string::npos);
}

}  // namespace
}  // namespace sluice::service
