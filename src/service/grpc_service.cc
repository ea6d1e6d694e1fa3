// gRPC RateLimitService on the callback API: decisions are made inline on gRPC's threads
// (the embedded store never blocks; a Redis store blocks at most its call deadline).
#include "service/grpc_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "service/log.h"

namespace sluice::service {

Status DecideProto(Engine& engine, const pb::RateLimitRequest& request,
                   pb::RateLimitResponse* out) {
  RateLimitRequest req;
  req.domain = request.domain();
  req.hits_addend = request.hits_addend();
  const int n = request.descriptors_size();
  const std::size_t max = engine.settings_ptr()->max_descriptors;
  if (static_cast<std::size_t>(n) > max) {
    return Status::InvalidArgument("too many descriptors: " + std::to_string(n) + " (at most " +
                                   std::to_string(max) + ")");
  }
  req.descriptors.resize(n);
  for (int i = 0; i < n; ++i) {
    const auto& d = request.descriptors(i);
    DescriptorRequest& r = req.descriptors[i];
    r.entries.reserve(d.entries_size());
    for (const auto& e : d.entries()) r.entries.push_back(Entry{e.key(), e.value()});
    if (d.has_limit()) {
      r.has_override = true;
      r.override_requests_per_unit = d.limit().requests_per_unit();
      r.override_unit = static_cast<int>(d.limit().unit());
    }
    if (d.has_hits_addend()) {
      r.has_hits_addend = true;
      r.hits_addend = d.hits_addend().value();
    }
  }
  RateLimitResponse resp;
  if (Status s = engine.ShouldRateLimit(req, &resp); !s.ok()) return s;
  out->set_overall_code(static_cast<pb::RateLimitResponse::Code>(resp.overall_code));
  for (const DescriptorStatus& st : resp.statuses) {
    auto* s = out->add_statuses();
    s->set_code(static_cast<pb::RateLimitResponse::Code>(st.code));
    if (st.has_limit) {
      auto* l = s->mutable_current_limit();
      l->set_requests_per_unit(st.requests_per_unit);
      l->set_unit(static_cast<pb::RateLimitResponse::RateLimit::Unit>(st.unit));
      if (!st.name.empty()) l->set_name(st.name);
      auto* d = s->mutable_duration_until_reset();
      d->set_seconds(st.duration_until_reset / 1'000'000);
      d->set_nanos(static_cast<int>(st.duration_until_reset % 1'000'000) * 1000);
    }
    s->set_limit_remaining(st.limit_remaining);
  }
  for (const auto& [k, v] : resp.response_headers) {
    auto* h = out->add_response_headers_to_add();
    h->set_key(k);
    h->set_value(v);
  }
  return Status::Ok();
}

namespace {

grpc::StatusCode ToGrpc(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ErrorCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

class RlsService final : public pb::RateLimitService::CallbackService {
 public:
  explicit RlsService(Engine& engine) : engine_(engine) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest* request,
                                            pb::RateLimitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    Status s = DecideProto(engine_, *request, response);
    if (!s.ok()) {
      engine_.metrics().CountRequest(Api::kGrpc, s.code() == ErrorCode::kInvalidArgument
                                                     ? RequestOutcome::kInvalid
                                                     : RequestOutcome::kError);
      Log(LogLevel::kWarn, "bad_request",
          {{"api", "grpc"}, {"domain", request->domain()}, {"error", s.message()}});
      reactor->Finish(grpc::Status(ToGrpc(s.code()), s.message()));
      return reactor;
    }
    engine_.metrics().CountRequest(Api::kGrpc,
                                   response->overall_code() == pb::RateLimitResponse::OVER_LIMIT
                                       ? RequestOutcome::kOverLimit
                                       : RequestOutcome::kOk);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  Engine& engine_;
};

}  // namespace

struct GrpcServer::Impl {
  std::unique_ptr<RlsService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcServer::~GrpcServer() {
  Shutdown(0);
}

int GrpcServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine, const std::string& addr,
                                                      std::size_t max_message_bytes) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<RlsService>(engine);
  grpc::ServerBuilder b;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &impl->port);
  b.RegisterService(impl->service.get());
  b.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  impl->server = b.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return Status::Unavailable("cannot listen for gRPC on " + addr);
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

void GrpcServer::Shutdown(Micros grace) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::microseconds(grace));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace sluice::service
