// sluice/key.h: turning a caller's identity into store keys.
//
// Every key that reaches a store goes through one encoder, so that
//  - composition is unambiguous: parts are escaped before they are joined, so
//    ("a:b", "c") and ("a", "b:c") never meet;
//  - user bytes never choose a Redis Cluster hash slot: '{' and '}' are escaped, and
//    the only hash tag in a key is the one sluice writes;
//  - length is bounded (kMaxKeyBytes of caller input).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

// The longest caller key (before escaping) a limiter accepts.
inline constexpr std::size_t kMaxKeyBytes = 256;

// Appends `part` to `out`, percent-encoding every byte outside [A-Za-z0-9._@/+=-]
// (so ':', '{', '}', '%', spaces and non-ASCII are escaped). Injective.
void AppendEscaped(std::string& out, std::string_view part);

// Joins escaped parts with ':', e.g. JoinKey({"ip", "::1"}) == "ip:%3A%3A1". Use it to
// build a caller key out of several identities (user, IP, route).
std::string JoinKey(std::initializer_list<std::string_view> parts);

// The store key the Limiter uses for `key` under policy `policy_name`:
// "<prefix>:{<escaped key>}:<policy_name>". All policies of one caller key share the
// hash tag, so a multi-limit check touches one Redis Cluster slot. Fails with
// InvalidArgument when `key` is empty or longer than kMaxKeyBytes.
Result<std::string> StoreKey(std::string_view prefix, std::string_view key,
                             std::string_view policy_name);

}  // namespace sluice
