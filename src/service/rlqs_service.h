// The Rate Limit Quota Service on sluiced's gRPC port (docs/rlqs.md):
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas, one
// RlqsSession (service/rlqs_session.h) per stream.
#pragma once

#include <memory>

#include "service/engine.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace sluice::service {

// The service for `engine`, to register on a grpc::ServerBuilder (the engine outlives it).
std::unique_ptr<grpc::Service> MakeRlqsService(Engine& engine);

}  // namespace sluice::service
