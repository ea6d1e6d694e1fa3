// The one FNV-1a hash of sluice (64 bits): the deny cache's key hashes and sluiced's
// hashed long keys. Two seeds give the two halves of a 128-bit key hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;     // FNV-1a's basis
inline constexpr std::uint64_t kFnvOffsetAlt = 0x84222325cbf29ce4ULL;  // a second basis

// FNV-1a of `s` from the basis `h`.
inline std::uint64_t Fnv1a64(std::string_view s, std::uint64_t h = kFnvOffset) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace sluice
