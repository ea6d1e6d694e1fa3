#include "e2e.h"

#include <gtest/gtest.h>

#include <sstream>

namespace sluice::testing {

httplib::Result Stack::Get(const std::string& path, const httplib::Headers& headers) const {
  httplib::Client c("127.0.0.1", envoy->port());
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  return c.Get(path.c_str(), headers);
}

namespace {

std::string MetricsBody(const Sluiced& sluiced) {
  httplib::Client c("127.0.0.1", sluiced.http_port);
  c.set_read_timeout(10);
  auto r = c.Get("/metrics");
  return r && r->status == 200 ? r->body : "";
}

}  // namespace

std::string Stack::Metrics() const {
  return MetricsBody(sluiced);
}

double Stack::Metric(const std::string& series) const {
  return SluicedMetric(sluiced, series);
}

double SluicedMetric(const Sluiced& sluiced, const std::string& series) {
  std::istringstream in(MetricsBody(sluiced));
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

std::unique_ptr<Stack> StartStack(const std::string& sluiced_yaml, EnvoyOptions options,
                                  const std::vector<std::string>& sluiced_flags) {
  auto s = std::make_unique<Stack>();
  WriteFile(s->config(), sluiced_yaml);
  s->sluiced = StartSluiced(s->config(), s->dir.File("sluiced.log"), sluiced_flags);
  if (s->sluiced.grpc_port == 0) return nullptr;  // StartSluiced failed the test
  options.upstream_port = s->upstream.port();
  options.rls_port = s->sluiced.grpc_port;
  auto envoy = Envoy::Start(std::move(options));
  if (!envoy.ok()) {
    ADD_FAILURE() << envoy.status().ToString();
    return nullptr;
  }
  s->envoy = std::move(*envoy);
  return s;
}

std::string Header(const httplib::Result& r, const std::string& name) {
  return r ? r->get_header_value(name.c_str()) : "";
}

}  // namespace sluice::testing
