// The stack every Envoy end-to-end test runs: a local upstream, sluiced (its gRPC port
// on loopback) and a real Envoy in front of both (tests/support/envoy.h). Each test
// starts its own, so no state is shared between tests, and stops it when it ends.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "envoy.h"
#include "process.h"

namespace sluice::testing {

struct Stack {
  TempDir dir;
  HttpUpstream upstream;
  Sluiced sluiced;
  std::unique_ptr<Envoy> envoy;

  // sluiced's config file (rewrite it and SIGHUP sluiced to reload).
  std::string config() const { return dir.File("sluiced.yaml"); }
  // GET `path` through Envoy (a fresh connection, bounded by 10 s).
  httplib::Result Get(const std::string& path = "/", const httplib::Headers& headers = {}) const;
  // sluiced's GET /metrics body; empty when it does not answer.
  std::string Metrics() const;
  // The value of one sluiced series (e.g. `sluiced_shadow_over_limit_total{...}`), the
  // whole line's name and labels as printed; -1 when absent.
  double Metric(const std::string& series) const;
};

// Writes `sluiced_yaml`, starts sluiced with it (plus `sluiced_flags`) and an Envoy in
// front of it with `options` (the ports are filled in). Fails the test and returns null
// when either does not start.
std::unique_ptr<Stack> StartStack(const std::string& sluiced_yaml, EnvoyOptions options = {},
                                  const std::vector<std::string>& sluiced_flags = {});

// The value of one series of `sluiced`'s GET /metrics (the whole line's name and labels
// as printed); -1 when absent or sluiced does not answer.
double SluicedMetric(const Sluiced& sluiced, const std::string& series);

// The response header `name`, or "" (httplib::Result may be empty: then "").
std::string Header(const httplib::Result& r, const std::string& name);

}  // namespace sluice::testing
