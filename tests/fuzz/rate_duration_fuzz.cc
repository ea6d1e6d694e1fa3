// ParseDuration, ParseRate and ParseAlgorithm: config files, CLI flags and sluiced's
// rules all go through them. An accepted value must be usable as a policy.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "sluice/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = sluice::ParseDuration(text); d.ok()) {
    FUZZ_CHECK(*d >= 0);
  } else {
    FUZZ_CHECK(!d.status().message().empty());
  }
  if (auto r = sluice::ParseRate(text); r.ok()) {
    FUZZ_CHECK(r->limit >= 1);
    FUZZ_CHECK(r->window > 0);
  } else {
    FUZZ_CHECK(!r.status().message().empty());
  }
  if (auto a = sluice::ParseAlgorithm(text); a.ok()) {
    FUZZ_CHECK(sluice::AlgorithmName(*a)[0] != 0);
  }
  return 0;
}
