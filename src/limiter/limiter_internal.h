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

}  // namespace sluice::limiter_internal
