// Internal: the Limiter's store-key builder, exposed for unit tests.
#pragma once

#include <string>
#include <string_view>

namespace sluice::limiter_internal {

// Writes "<prefix>:{<escaped key>}:<policy>" into `out`, byte for byte what
// sluice::StoreKey returns (AppendEscaped's escaping), without allocating once `out`
// has grown to the largest key seen. The caller has validated `key`'s length.
void BuildStoreKey(std::string& out, std::string_view prefix, std::string_view key,
                   std::string_view policy);

// The same key, written at the start of `buf` and returned as a view into it; `buf`
// is grown when needed and never shrunk (the Limiter's per-thread buffers), so a
// call with a key no longer than one seen before neither allocates nor clears.
std::string_view BuildStoreKeyView(std::string& buf, std::string_view prefix, std::string_view key,
                                   std::string_view policy);

}  // namespace sluice::limiter_internal
