// sluiced as a Rate Limit Quota Service (docs/rlqs.md): its settings (`sluiced: rlqs:` in
// the YAML). The service itself is service/rlqs_service.h.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sluice/clock.h"

namespace sluice::service {

struct RlqsSettings {
  // The bucket id keys that form the descriptor, in this order (a key missing from a
  // bucket id is left out; other keys are ignored). Empty: every key, sorted by name.
  std::vector<std::string> descriptor_keys;
  // The slice of a limit's capacity one assignment takes from the store: (0, 1].
  double slice = 0.1;
  // How long an assignment lives at most (never past the window the store reported).
  Micros assignment_ttl = 10'000'000;
  // Buckets one stream may report; a stream with more is ended (RESOURCE_EXHAUSTED).
  std::size_t max_buckets_per_stream = 1000;
};

}  // namespace sluice::service
