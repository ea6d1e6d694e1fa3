// The one key escaper of sluice (sluice/key.h's AppendEscaped and the Limiter's
// non-allocating store-key builder both write through it): every byte outside
// [A-Za-z0-9._@/+=-] becomes %XX (upper-case hex), so escaped parts never contain ':',
// '{', '}' or '%' of their own.
#pragma once

#include <array>
#include <string_view>

namespace sluice::key_internal {

// Which bytes are left as they are.
inline constexpr std::array<bool, 256> kPlainByte = [] {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (char c : std::string_view("._-@/+=")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

// Writes `part` escaped at `p`, which has room for 3 * part.size() bytes; returns the
// end of what it wrote.
inline char* WriteEscaped(char* p, std::string_view part) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char ch : part) {
    const auto c = static_cast<unsigned char>(ch);
    if (kPlainByte[c]) {
      *p++ = ch;
    } else {
      p[0] = '%';
      p[1] = kHex[c >> 4];
      p[2] = kHex[c & 15];
      p += 3;
    }
  }
  return p;
}

}  // namespace sluice::key_internal
