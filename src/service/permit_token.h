// The permit token /v1/acquire hands out and /v1/release and /v1/extend take back:
// "<permit id>.<domain and descriptors, base64url>". Opaque to clients; it names the
// descriptors so that a release needs nothing else.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "service/request.h"
#include "sluice/status.h"

namespace sluice::service {

// The token for permit `id` taken for `request`'s domain and descriptors.
std::string EncodePermitToken(std::string_view id, const RateLimitRequest& request);
// Parses a token into its id and a request (views into `storage`, which it fills).
// InvalidArgument naming what is wrong ("permit ... is not a token from /v1/acquire").
Status DecodePermitToken(std::string_view token, std::string* id, std::string* storage,
                         RateLimitRequest* request);

}  // namespace sluice::service
