#include "sluice/key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace sluice {
namespace {

TEST(Key, CompositionIsUnambiguous) {
  EXPECT_NE(JoinKey({"a:b", "c"}), JoinKey({"a", "b:c"}));
  EXPECT_NE(JoinKey({"a%3Ab"}), JoinKey({"a:b"}));
  EXPECT_EQ(JoinKey({"ip", "::1"}), "ip:%3A%3A1");
}

TEST(Key, UserBytesCannotChooseTheHashSlot) {
  auto k = StoreKey("sluice", "}evil{tag", "api");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, "sluice:{%7Devil%7Btag}:api");
  // Exactly one '{' and one '}': the hash tag sluice wrote.
  EXPECT_EQ(std::count(k->begin(), k->end(), '{'), 1);
  EXPECT_EQ(std::count(k->begin(), k->end(), '}'), 1);
}

TEST(Key, EscapingIsInjectiveOnAllBytePairs) {
  std::set<std::string> seen;
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 17) {
      std::string in{static_cast<char>(a), static_cast<char>(b)};
      std::string out;
      AppendEscaped(out, in);
      EXPECT_TRUE(seen.insert(out).second) << a << "," << b;
    }
  }
}

TEST(Key, LengthIsBounded) {
  EXPECT_TRUE(StoreKey("s", std::string(kMaxKeyBytes, 'x'), "p").ok());
  auto r = StoreKey("s", std::string(kMaxKeyBytes + 1, 'x'), "p");
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(StoreKey("s", "", "p").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
