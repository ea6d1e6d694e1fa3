// sluiced's YAML config loader (the file an operator, or a config-management system,
// writes): ParseConfig, then compiling it into an engine as a reload does. Errors must
// name the file and a line ("fuzz.yaml:3: ..."), never crash or throw.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "service/config.h"
#include "service/engine.h"
#include "sluice/clock.h"
#include "sluice/memory_store.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = sluice::service::ParseConfig(text, "fuzz.yaml");
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == sluice::ErrorCode::kInvalidArgument);
    FUZZ_CHECK(config.status().message().find("fuzz.yaml") != std::string::npos);
    return 0;
  }
  static auto store = std::make_shared<sluice::MemoryStore>();
  static auto clock = std::make_shared<sluice::ManualClock>(1'750'000'000'000'000);
  auto engine = sluice::service::Engine::Create(*config, {store, clock});
  if (!engine.ok()) FUZZ_CHECK(!engine.status().message().empty());
  return 0;
}
