// Envoy's RateLimitRequest over gRPC: the bytes of a request message (what gRPC hands
// the service after framing) parsed by protobuf, then converted to the engine's checks
// and decided (DecideProto). Bad input must be an InvalidArgument, never a crash; a
// decided request has one status per descriptor.
#include <cstdint>

#include "fuzz_engine.h"
#include "service/grpc_service.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& engine = sluice::fuzz::FuzzEngine();
  sluice::service::pb::RateLimitRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  sluice::service::pb::RateLimitResponse response;
  const sluice::Status s = sluice::service::DecideProto(engine, request, &response);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == sluice::ErrorCode::kInvalidArgument);
    FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  FUZZ_CHECK(response.statuses_size() == request.descriptors_size());
  return 0;
}
