// Envoy's RateLimitService over gRPC, and the proto <-> engine translation that the HTTP
// /json endpoint shares.
#pragma once

#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "service/engine.h"
#include "sluice/status.h"

namespace sluice::service {

namespace pb = ::envoy::service::ratelimit::v3;

// Decides a proto request with `engine` and fills `out`. InvalidArgument for bad input,
// including a domain, key or value that is not UTF-8 (it names the field).
Status DecideProto(Engine& engine, const pb::RateLimitRequest& request, pb::RateLimitResponse* out);

// A running gRPC server with the RateLimitService and the RateLimitQuotaService
// (service/rlqs_service.h).
class GrpcServer {
 public:
  // Listens on `addr` (ADDR:PORT; port 0 picks a free one). A port in use is an error
  // unless `reuse_port` (SO_REUSEPORT: processes share the port and split its traffic).
  // Requests larger than `max_message_bytes` are refused by gRPC with RESOURCE_EXHAUSTED.
  // Serves grpc.health.v1.Health too, SERVING until SetServing(false). `bench_empty`
  // adds sluice.bench.v1.Empty (an immediate empty answer: the benchmarks' reference).
  static Result<std::unique_ptr<GrpcServer>> Start(Engine& engine, const std::string& addr,
                                                   std::size_t max_message_bytes,
                                                   bool reuse_port = false,
                                                   bool bench_empty = false);
  ~GrpcServer();
  int port() const;
  // What grpc.health.v1 answers for the server ("") and the RateLimitService.
  void SetServing(bool serving);
  // Stops accepting calls and waits up to `grace` microseconds for calls in flight.
  void Shutdown(Micros grace);

  struct Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::service
