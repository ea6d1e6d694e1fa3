// The parameters of sluiced's plain HTTP APIs (/v1/check, /v1/acquire, /v1/release,
// /v1/extend): a query string or an application/x-www-form-urlencoded body, decoded, and
// the one rule every entry point applies to them (issue #20 item 5): a parameter that
// names one thing (domain, hits, permit) is given once; parameters come in the query or
// in the body, never both; numbers are plain decimal digits. Like the YAML loader's
// refusal of duplicate keys, so that two readers can never resolve a request differently.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/request.h"
#include "sluice/status.h"

namespace sluice::service {

using Params = std::vector<std::pair<std::string, std::string>>;

// Decodes %XX escapes of `in` into `out` ('+' is a space when `plus_is_space`: a query,
// not a path). False for a malformed escape.
bool PercentDecode(std::string_view in, bool plus_is_space, std::string* out);

// Splits a query string ("a=1&b=%2F&b=x+y") into its pairs, in order, repeated names
// kept, percent-escapes and '+' decoded. InvalidArgument names a bad escape.
Result<Params> ParseQuery(std::string_view query);

// A request's parameters: those of its query, or those of its form body (`form` says the
// body is application/x-www-form-urlencoded). InvalidArgument when both carry some.
Result<Params> RequestParams(std::string_view query, bool form, std::string_view body);

// The value of `name`, or null when it is absent. InvalidArgument naming the parameter
// when it is given more than once.
Status OneParam(const Params& params, std::string_view name, const std::string** value);

// The one descriptor of /v1/check and /v1/acquire: domain=D, key=K&value=V pairs (in
// order, repeated keys kept: they are the descriptor's entries), hits=N (0..2^32-1, its
// own cost: 0 peeks). `request` views into `params`. InvalidArgument with the reason.
Status DescriptorFromParams(const Params& params, RateLimitRequest* request);

}  // namespace sluice::service
