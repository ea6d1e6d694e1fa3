// sluice/permit_id.h: what a permit id looks like (sluice/permit.h; StoreCheck::permit).
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice {

// A permit id is 128 random bits written as this many lower-case hex characters.
inline constexpr std::size_t kPermitIdLength = 32;

// True when `id` looks like a permit id (kPermitIdLength characters of [0-9a-f]).
bool IsPermitId(std::string_view id);

}  // namespace sluice
