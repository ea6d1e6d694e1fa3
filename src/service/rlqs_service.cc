// Streams on gRPC's callback API: a message is read, handed to its session, and the next
// one is read only when the session's decisions are done (so a stream holds at most one
// message and its answers); answers are written in order from a queue. Between messages
// an alarm at the session's next silence (RlqsSession::NextSilence) settles the buckets
// Envoy stopped reporting on while its stream stays open.
#include "service/rlqs_service.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "service/log.h"
#include "service/rlqs_session.h"

namespace sluice::service {
namespace {

using Reports = rlqs_pb::RateLimitQuotaUsageReports;
using Response = rlqs_pb::RateLimitQuotaResponse;

grpc::Status ToGrpcStatus(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kInvalidArgument:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, s.message());
    case ErrorCode::kResourceExhausted:
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, s.message());
    case ErrorCode::kUnavailable:
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, s.message());
    case ErrorCode::kDeadlineExceeded:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, s.message());
    default:
      return grpc::Status(grpc::StatusCode::INTERNAL, s.message());
  }
}

class Stream final : public grpc::ServerBidiReactor<Reports, Response> {
 public:
  explicit Stream(Engine& engine) : engine_(engine), session_(engine) { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!ok) return End(grpc::Status::OK);  // the client closed its side (or went away)
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      busy_ = true;
    }
    session_.Handle(in_, [this](const Status& s, Response& out) {
      if (!s.ok()) {
        engine_.metrics().rlqs().stream_errors.fetch_add(1, std::memory_order_relaxed);
        Log(LogLevel::kWarn, "bad_request", {{"api", "rlqs"}, {"error", s.message()}});
        return End(ToGrpcStatus(s));
      }
      if (out.bucket_action_size() > 0) Send(std::move(out));
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        busy_ = false;
        ArmSweep();
      }
      StartRead(&in_);
    });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    out_.pop_front();
    if (!ok) out_.clear();  // the stream is broken: nothing more gets through
    if (!out_.empty()) return StartWrite(&out_.front());
    writing_ = false;
    if (ending_) Finish(status_);
  }

  void OnDone() override {
    std::unique_ptr<grpc::Alarm> alarm;
    bool pending = false;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      done_ = true;
      pending = alarms_ > 0;
      if (pending) alarm = std::move(alarm_);
    }
    if (!pending) return delete this;
    // The last alarm callback deletes the stream. Destroying the alarm cancels it: its
    // callback still runs (ok = false), maybe inline here, so nothing of `this` after.
    alarm.reset();
  }

 private:
  // Arms an alarm at the session's next silence unless one fires by then (under mu_).
  void ArmSweep() {
    const Micros next = session_.NextSilence();
    if (next == 0 || ending_ || done_ || (alarm_at_ != 0 && alarm_at_ <= next)) return;
    const Micros wait = std::max<Micros>(0, next - engine_.clock().Now());
    ++alarms_;
    const std::uint64_t id = ++alarm_id_;
    alarm_at_ = next;
    alarm_ = std::make_unique<grpc::Alarm>();  // a later one it replaces is cancelled
    alarm_->Set(std::chrono::system_clock::now() + std::chrono::microseconds(wait),
                [this, id](bool ok) { OnAlarm(id, ok); });
  }
  void OnAlarm(std::uint64_t id, bool ok) {
    std::unique_lock<std::recursive_mutex> lock(mu_);
    --alarms_;
    if (id == alarm_id_) alarm_at_ = 0;
    if (done_) {
      if (alarms_ > 0) return;
      lock.unlock();
      return delete this;
    }
    // While a message is handled the session is not ours to touch; its end arms again.
    if (!ok || id != alarm_id_ || busy_ || ending_) return;
    session_.Sweep(engine_.clock().Now());
    ArmSweep();
  }
  void Send(Response r) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (ending_) return;
    out_.push_back(std::move(r));
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }
  // Finishes with `st` once the queued answers are written.
  void End(grpc::Status st) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (ending_) return;
    ending_ = true;
    status_ = std::move(st);
    if (!writing_) Finish(status_);
  }

  Engine& engine_;
  RlqsSession session_;
  Reports in_;
  std::recursive_mutex mu_;   // recursive: a reaction may run inline from StartWrite
  std::deque<Response> out_;  // front: being written
  bool writing_ = false;
  bool ending_ = false;
  grpc::Status status_;
  // Sweeps (under mu_): a message is being handled; the alarm, when it fires (engine
  // clock, 0: none armed), its id, and the callbacks still to come (the stream is
  // deleted after the last).
  bool busy_ = false;
  bool done_ = false;
  std::unique_ptr<grpc::Alarm> alarm_;
  Micros alarm_at_ = 0;
  std::uint64_t alarm_id_ = 0;
  int alarms_ = 0;
};

class RlqsService final : public rlqs_pb::RateLimitQuotaService::CallbackService {
 public:
  explicit RlqsService(Engine& engine) : engine_(engine) {}
  grpc::ServerBidiReactor<Reports, Response>* StreamRateLimitQuotas(
      grpc::CallbackServerContext*) override {
    return new Stream(engine_);
  }

 private:
  Engine& engine_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeRlqsService(Engine& engine) {
  return std::make_unique<RlqsService>(engine);
}

}  // namespace sluice::service
