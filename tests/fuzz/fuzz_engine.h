// A sluiced engine for the request fuzzers: the rules of examples/sluiced.yaml's kind
// (nested descriptors, replaces, unlimited, shadow mode, every algorithm) on an
// in-process store with a fixed clock, built once per process.
#pragma once

#include <memory>

#include "fuzz_util.h"
#include "service/config.h"
#include "service/engine.h"
#include "sluice/clock.h"
#include "sluice/memory_store.h"

namespace sluice::fuzz {

inline constexpr const char* kEngineYaml = R"(
domains:
  - domain: api
    descriptors:
      - key: remote_address
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: api_key
        rate_limit: {name: per_api_key, unit: minute, requests_per_unit: 100,
                     algorithm: token_bucket, burst: 20}
        descriptors:
          - key: plan
            value: partner
            rate_limit: {name: partner, replaces: [{name: per_api_key}], unit: minute,
                         requests_per_unit: 1000}
      - key: path
        value: /login
        descriptors:
          - key: remote_address
            rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window_log,
                         failure_mode: fail_closed}
      - key: path
        value: /healthz
        rate_limit: {unlimited: true}
  - domain: messaging
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 1000, algorithm: gcra}
        shadow_mode: true
      - key: room
        rate_limit: {unit: second, requests_per_unit: 3, algorithm: fixed_window}
)";

inline service::Engine& FuzzEngine() {
  // Owned, so that it is destroyed at exit: LeakSanitizer would otherwise report the
  // MemoryStore's keys (it cannot follow the store's packed key pointers).
  static std::unique_ptr<service::Engine> engine = [] {
    auto config = service::ParseConfig(kEngineYaml, "fuzz.yaml");
    if (!config.ok()) std::fprintf(stderr, "%s\n", config.status().message().c_str());
    FUZZ_CHECK(config.ok());
    auto e = service::Engine::Create(
        *config, service::Engine::Options{std::make_shared<MemoryStore>(),
                                          std::make_shared<ManualClock>(1'750'000'000'000'000)});
    if (!e.ok()) std::fprintf(stderr, "%s\n", e.status().message().c_str());
    FUZZ_CHECK(e.ok());
    return std::move(*e);
  }();
  return *engine;
}

}  // namespace sluice::fuzz
