// gRPC RateLimitService on the callback API: decisions are made inline on gRPC's threads
// (the embedded store never blocks; a Redis store blocks at most its call deadline).
#include "service/grpc_service.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "service/log.h"
#include "service/rlqs_service.h"
#include "sluice/bench/v1/empty.grpc.pb.h"

namespace sluice::service {

namespace {

// The engine's request for a proto one (views into `request`). InvalidArgument for bad
// input.
Status FromProto(Engine& engine, const pb::RateLimitRequest& request, RateLimitRequest* out) {
  RateLimitRequest& req = *out;
  if (!core::ValidUtf8(request.domain()))
    return Status::InvalidArgument("domain is not valid UTF-8");
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& d = request.descriptors(i);
    for (int j = 0; j < d.entries_size(); ++j) {
      const bool key_ok = core::ValidUtf8(d.entries(j).key());
      if (!key_ok || !core::ValidUtf8(d.entries(j).value())) {
        return Status::InvalidArgument("descriptors[" + std::to_string(i) + "].entries[" +
                                       std::to_string(j) + "]." + (key_ok ? "value" : "key") +
                                       " is not valid UTF-8");
      }
    }
  }
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
      if (d.hits_addend().value() > kMaxHitsAddend) {
        return Status::InvalidArgument("descriptors[" + std::to_string(i) +
                                       "].hits_addend is larger than " +
                                       std::to_string(kMaxHitsAddend));
      }
      r.has_hits_addend = true;
      r.hits_addend = d.hits_addend().value();
    }
  }
  return Status::Ok();
}

void ToProto(const RateLimitResponse& resp, pb::RateLimitResponse* out) {
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
  // Descriptor metadata (JSON objects the config loader wrote) becomes the response's
  // dynamic metadata as envoyproxy/ratelimit sends it: one object under the field
  // "metadata", merged from every OK descriptor, an earlier descriptor's field winning
  // over a later one's.
  google::protobuf::Struct merged;
  for (const DescriptorStatus& st : resp.statuses) {
    if (st.metadata.empty()) continue;
    google::protobuf::Struct md;
    if (!google::protobuf::util::JsonStringToMessage(st.metadata, &md).ok()) continue;
    for (const auto& [k, v] : md.fields()) merged.mutable_fields()->insert({k, v});
  }
  if (!merged.fields().empty()) {
    *(*out->mutable_dynamic_metadata()->mutable_fields())["metadata"].mutable_struct_value() =
        std::move(merged);
  }
  for (const auto& [k, v] : resp.response_headers) {
    auto* h = out->add_response_headers_to_add();
    h->set_key(k);
    h->set_value(v);
  }
}

}  // namespace

Status DecideProto(Engine& engine, const pb::RateLimitRequest& request,
                   pb::RateLimitResponse* out) {
  RateLimitRequest req;
  if (Status s = FromProto(engine, request, &req); !s.ok()) return s;
  RateLimitResponse resp;
  if (Status s = engine.ShouldRateLimit(req, &resp); !s.ok()) return s;
  ToProto(resp, out);
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

// Parses the request bytes itself (a raw method): when gRPC's generated handler fails
// to parse them it answers UNIMPLEMENTED with no message, as if the method did not exist.
// `bytes` as a RateLimitRequest; false when they are not one.
bool Parse(const grpc::ByteBuffer& bytes, pb::RateLimitRequest* out) {
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) return false;
  if (slices.size() == 1)
    return out->ParseFromArray(slices[0].begin(), static_cast<int>(slices[0].size()));
  std::string all;
  for (const grpc::Slice& x : slices)
    all.append(reinterpret_cast<const char*>(x.begin()), x.size());
  return out->ParseFromString(all);
}

class RlsService final : public pb::RateLimitService::WithRawCallbackMethod_ShouldRateLimit<
                             pb::RateLimitService::CallbackService> {
 public:
  explicit RlsService(Engine& engine) : engine_(engine) {}

  // Decides with the engine's asynchronous path: no gRPC thread waits on Redis; the
  // reactor finishes from the store's I/O thread (or inline for the embedded store).
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* bytes,
                                            grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    pb::RateLimitRequest request;
    if (!Parse(*bytes, &request)) {
      Fail(reactor, Status::InvalidArgument(
                        "the request is not a valid envoy.service.ratelimit.v3.RateLimitRequest "
                        "(protobuf: truncated, a malformed tag or varint, or nested deeper than "
                        "protobuf allows)"));
      return reactor;
    }
    RateLimitRequest req;
    if (Status s = FromProto(engine_, request, &req); !s.ok()) {
      Fail(reactor, s);
      return reactor;
    }
    engine_.ShouldRateLimitAsync(
        req, [this, reactor, response](const Status& s, RateLimitResponse& out) {
          if (!s.ok()) return Fail(reactor, s);
          pb::RateLimitResponse proto;
          ToProto(out, &proto);
          bool own = false;
          if (!grpc::SerializationTraits<pb::RateLimitResponse>::Serialize(proto, response, &own)
                   .ok()) {
            return Fail(reactor, Status::Internal("cannot serialize the response"));
          }
          engine_.metrics().CountRequest(Api::kGrpc, out.overall_code == Code::kOverLimit
                                                         ? RequestOutcome::kOverLimit
                                                         : RequestOutcome::kOk);
          reactor->Finish(grpc::Status::OK);
        });
    return reactor;
  }

 private:
  void Fail(grpc::ServerUnaryReactor* reactor, const Status& s) {
    engine_.metrics().CountRequest(Api::kGrpc, s.code() == ErrorCode::kInvalidArgument
                                                   ? RequestOutcome::kInvalid
                                                   : RequestOutcome::kError);
    Log(LogLevel::kWarn, "bad_request", {{"api", "grpc"}, {"error", s.message()}});
    reactor->Finish(grpc::Status(ToGrpc(s.code()), s.message()));
  }

  Engine& engine_;
};

// The benchmarks' reference: what gRPC costs without a decision.
class EmptyService final : public ::sluice::bench::v1::Empty::CallbackService {
  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest*,
                                            pb::RateLimitResponse*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace

struct GrpcServer::Impl {
  std::unique_ptr<RlsService> service;
  std::unique_ptr<EmptyService> empty;
  std::unique_ptr<grpc::Service> rlqs;  // service/rlqs_service.h
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
                                                      std::size_t max_message_bytes,
                                                      bool reuse_port, bool bench_empty) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<RlsService>(engine);
  // Process-wide switch, read by every ServerBuilder built after it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder b;
  // gRPC sets SO_REUSEPORT by default: a second sluiced on the same port would start and
  // silently take half the traffic (and half of every limit).
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, reuse_port ? 1 : 0);
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &impl->port);
  b.RegisterService(impl->service.get());
  impl->rlqs = MakeRlqsService(engine);
  b.RegisterService(impl->rlqs.get());
  if (bench_empty) {
    impl->empty = std::make_unique<EmptyService>();
    b.RegisterService(impl->empty.get());
  }
  b.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  impl->server = b.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return Status::Unavailable("cannot listen for gRPC on " + addr +
                               " (is the port in use? --reuse-port shares it on purpose)");
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

void GrpcServer::SetServing(bool serving) {
  if (!impl_->server) return;
  if (auto* h = impl_->server->GetHealthCheckService()) {
    h->SetServingStatus(serving);
  }
}

void GrpcServer::Shutdown(Micros grace) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::microseconds(grace));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace sluice::service
