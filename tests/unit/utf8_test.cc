// core/utf8.h: the one UTF-8 check shared by sluiced's request and config validation,
// its metric labels and the CLI's JSON output. Table from RFC 3629's boundaries.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::core {
namespace {

TEST(Utf8, SequenceLengthAtEachBoundary) {
  struct Case {
    std::string bytes;
    std::size_t length;
  };
  const Case cases[] = {
      {"", 0},
      {"a", 1},
      {"\x7F", 1},
      {"\xC2\x80", 2},          // U+0080, the first two-byte form
      {"\xDF\xBF", 2},          // U+07FF
      {"\xC0\x80", 0},          // overlong NUL
      {"\xC1\xBF", 0},          // overlong
      {"\xE0\xA0\x80", 3},      // U+0800
      {"\xE0\x9F\xBF", 0},      // overlong three-byte form
      {"\xED\x9F\xBF", 3},      // U+D7FF, the last before the surrogates
      {"\xED\xA0\x80", 0},      // U+D800, a surrogate
      {"\xEF\xBF\xBF", 3},      // U+FFFF
      {"\xF0\x90\x80\x80", 4},  // U+10000
      {"\xF0\x8F\xBF\xBF", 0},  // overlong four-byte form
      {"\xF4\x8F\xBF\xBF", 4},  // U+10FFFF, the last code point
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"\xF5\x80\x80\x80", 0},
      {"\x80", 0},          // a stray continuation byte
      {"\xE2\x82", 0},      // cut short by the end
      {"\xE2\x28\xA1", 0},  // a bad continuation byte
      {"\xC3\xA9tail", 2},  // only the first sequence counts
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Utf8SequenceLength(c.bytes), c.length) << testing::PrintToString(c.bytes);
  }
}

TEST(Utf8, ValidUtf8NeedsEverySequenceWellFormed) {
  EXPECT_TRUE(ValidUtf8(""));
  EXPECT_TRUE(ValidUtf8("plain ascii"));
  EXPECT_TRUE(ValidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(ValidUtf8("caf\xC3"));         // cut at the end
  EXPECT_FALSE(ValidUtf8("a\xED\xA0\x80z"));  // a surrogate in the middle
  EXPECT_FALSE(ValidUtf8(std::string("a\xFF", 2)));
}

}  // namespace
}  // namespace sluice::core
