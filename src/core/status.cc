#include "sluice/status.h"

#include "sluice/decision.h"

namespace sluice {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

const std::string& Status::message() const {
  static const std::string* const kNone = new std::string();
  return rep_ ? rep_->message : *kNone;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(ErrorCodeName(rep_->code)) + ": " + rep_->message;
}

const char* DecisionSourceName(DecisionSource s) {
  switch (s) {
    case DecisionSource::kStore:
      return "store";
    case DecisionSource::kDenyCache:
      return "deny_cache";
    case DecisionSource::kFailOpen:
      return "fail_open";
    case DecisionSource::kFailClosed:
      return "fail_closed";
    case DecisionSource::kLocalFallback:
      return "local_fallback";
    case DecisionSource::kLease:
      return "lease";
  }
  return "unknown";
}

}  // namespace sluice
