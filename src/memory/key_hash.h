// MemoryStore's key hash (inline: every decision hashes its key, and the table
// rehashes keys when it moves slots).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice::memory_internal {

namespace key_hash_detail {

inline std::uint64_t Load64(const char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
inline std::uint64_t Load32(const char* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
// 64x64 -> 128-bit multiply, folded: the mixing step of wyhash.
inline std::uint64_t Mum(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

}  // namespace key_hash_detail

// 64-bit hash of a store key (wyhash-style multiply-fold; never 0).
inline std::uint64_t HashKey(std::string_view k) {
  // wyhash's structure: 16 bytes per multiply, the last 16 bytes (overlapping) and
  // the length folded in at the end. A 29-byte Limiter key takes three dependent
  // multiplies instead of the four rounds and finaliser of FNV-over-words before.
  constexpr std::uint64_t kS0 = 0xa0761d6478bd642fULL;
  constexpr std::uint64_t kS1 = 0xe7037ed1a0b428dbULL;
  constexpr std::uint64_t kS2 = 0x8ebc6af09c88c6e3ULL;
  const char* p = k.data();
  const std::size_t n = k.size();
  std::uint64_t seed = kS0 ^ n;
  std::uint64_t a = 0, b = 0;
  if (n <= 16) {
    if (n >= 8) {
      a = key_hash_detail::Load64(p);
      b = key_hash_detail::Load64(p + n - 8);
    } else if (n >= 4) {
      a = key_hash_detail::Load32(p);
      b = key_hash_detail::Load32(p + n - 4);
    } else if (n > 0) {
      const auto u = [p](std::size_t i) { return std::uint64_t{static_cast<unsigned char>(p[i])}; };
      a = (u(0) << 16) | (u(n >> 1) << 8) | u(n - 1);
    }
  } else {
    for (std::size_t i = 0; i + 16 < n; i += 16) {
      seed = key_hash_detail::Mum(key_hash_detail::Load64(p + i) ^ kS1,
                                  key_hash_detail::Load64(p + i + 8) ^ seed);
    }
    a = key_hash_detail::Load64(p + n - 16);
    b = key_hash_detail::Load64(p + n - 8);
  }
  return key_hash_detail::Mum(kS2 ^ n, key_hash_detail::Mum(a ^ kS1, b ^ seed)) |
         1;  // 0 marks an empty slot
}

}  // namespace sluice::memory_internal
