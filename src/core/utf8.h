// Internal: UTF-8 checks for text from clients, config files and metric labels. One
// definition of "well-formed" (RFC 3629) for every part of sluice that meets text.
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice::core {

// Length (1-4) of the well-formed UTF-8 sequence at the start of `s`, or 0 when `s` is
// empty or does not start with one: no overlong forms, no UTF-16 surrogates, nothing
// above U+10FFFF, no stray continuation byte, and no sequence cut short by the end.
inline std::size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong below
    if (c == 0xED) hi = 0x9F;  // surrogates above
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong below
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, 0xC0, 0xC1 or 0xF5..0xFF
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  }
  return n;
}

// True when all of `s` is well-formed UTF-8 (the empty string is).
inline bool ValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace sluice::core
