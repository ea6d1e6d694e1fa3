// Internal: permit ids (sluice/permit.h).
#pragma once

#include <string>

namespace sluice::permit_internal {

// A new permit id: 128 random bits as kPermitIdLength lower-case hex characters. Each
// thread draws from its own generator, seeded from std::random_device and reseeded
// after a fork (a child must not repeat its parent's ids).
std::string NewPermitId();

}  // namespace sluice::permit_internal
