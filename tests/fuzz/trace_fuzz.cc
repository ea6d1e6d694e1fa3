// `sluice simulate --trace FILE`: the trace-file parser. Accepted requests have a key
// of 1-256 bytes and a cost of at least 1; errors name the input and a line.
#include <climits>
#include <cstdint>
#include <sstream>
#include <string>

#include "cli/simulate.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  auto traffic = sluice::cli::ParseTrace(in, "fuzz.trace");
  if (!traffic.ok()) {
    FUZZ_CHECK(traffic.status().message().find("fuzz.trace:") != std::string::npos);
    return 0;
  }
  sluice::Micros last = INT64_MIN;
  for (const sluice::cli::Request& r : traffic->requests) {
    FUZZ_CHECK(r.cost >= 1);
    FUZZ_CHECK(r.key < traffic->keys.size());
    FUZZ_CHECK(r.t >= last);  // replayed in time order
    last = r.t;
  }
  for (const std::string& k : traffic->keys) FUZZ_CHECK(!k.empty() && k.size() <= 256);
  return 0;
}
