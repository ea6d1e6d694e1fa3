// sluice/status.h: error values returned by every fallible sluice call.
//
// The decision hot path never throws. Calls that can fail return a Status
// (no value) or a Result<T> (a value or a Status).
#pragma once

#include <cassert>
#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace sluice {

// What went wrong, coarse enough to act on.
enum class ErrorCode {
  kOk = 0,
  // The caller passed something that can never work (bad policy field, a cost
  // greater than the limit, a malformed URL). Retrying will not help.
  kInvalidArgument,
  // The store could not be reached or answered with an error; retrying later may help.
  kUnavailable,
  // The store did not answer before the call's deadline. The operation may or may
  // not have been applied.
  kDeadlineExceeded,
  // A bounded resource is full (for example MemoryStore's key cap).
  kResourceExhausted,
  // Something that was asked for does not exist (an unknown policy name).
  kNotFound,
  // A bug or an unexpected answer.
  kInternal,
  // A feature this build does not provide (e.g. a Redis topology not supported yet).
  kUnimplemented,
  // A wait was cancelled by the caller (CancellationToken); what it had taken was
  // given back (Limiter::AcquireWaiting).
  kCancelled,
};

// Returns a stable lower-case name for `code`, e.g. "invalid_argument".
const char* ErrorCodeName(ErrorCode code);

// A success, or an error code with a human-readable message that names what is wrong.
// Cheap to copy when ok. Thread-compatible.
class Status {
 public:
  // Constructs a success.
  Status() = default;
  // Constructs an error; `code` must not be kOk (a kOk code constructs a success).
  Status(ErrorCode code, std::string message)
      : rep_(code == ErrorCode::kOk ? nullptr : new Rep{code, std::move(message)}) {}
  Status(const Status& other) : rep_(other.rep_ ? new Rep(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_.reset(other.rep_ ? new Rep(*other.rep_) : nullptr);
    return *this;
  }
  // A moved-from Status is a success.
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {ErrorCode::kInvalidArgument, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {ErrorCode::kDeadlineExceeded, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {ErrorCode::kResourceExhausted, std::move(m)};
  }
  static Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
  static Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {ErrorCode::kUnimplemented, std::move(m)}; }
  static Status Cancelled(std::string m) { return {ErrorCode::kCancelled, std::move(m)}; }

  bool ok() const { return rep_ == nullptr; }
  ErrorCode code() const { return rep_ ? rep_->code : ErrorCode::kOk; }
  // The message; empty for a success.
  const std::string& message() const;
  // "invalid_argument: policy 'api': limit must be > 0"
  std::string ToString() const;

 private:
  // A success is a null pointer: made, tested, moved and destroyed at the cost of a
  // pointer on the decision path, where every layer returns one.
  struct Rep {
    ErrorCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

// Either a T or an error Status. Accessing value() of an error is a bug (asserts).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // The error; a success Status when ok().
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sluice
