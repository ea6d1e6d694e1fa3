// The rate-limit header fields of a sluiced answer, in the format `response_headers`
// selects; the values come from src/http/headers.cc, the middleware's formatter, so
// sluiced and the middleware answer alike (issue #17 bug 2).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "service/config.h"
#include "service/rules.h"
#include "sluice/decision.h"
#include "sluice/policy.h"

namespace sluice::service {

// One limit reported in the headers: the name they call it by, its policy, its decision
// (remaining as the status reports it).
struct HeaderItem {
  std::string name;
  bool named = false;  // the rule has a name of its own
  const Policy* policy = nullptr;
  Decision d;
  bool above_capacity = false;  // denied for a cost no wait lets pass
};

// The name a header gives the limit of rule `r` on descriptor `i`: its rule's name, else
// "d<descriptor index>" (with several limits on the descriptor, "d<i>.<limit index>").
std::string HeaderPolicyName(const Rule& r, std::size_t i);

// Appends the headers for every limit of every limited descriptor (`items`, at most
// kMaxChecks); `binding` indexes the binding item. See the header table in
// docs/sluiced.md.
void AppendHeaders(Settings::Headers mode, const std::vector<HeaderItem>& items,
                   std::size_t binding, std::vector<std::pair<std::string, std::string>>& h);

}  // namespace sluice::service
