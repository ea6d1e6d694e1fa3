// Internal: a byte stream to one Redis endpoint (TCP or unix socket; TLS is another
// implementation of the same interface).
//
// Connect never blocks past its deadline: the socket is non-blocking from the start
// and connect() completion is polled. Afterwards Read and Write never block either;
// the owner polls fd() for PollEvents() and calls them again.
#pragma once

#include <poll.h>

#include <cstddef>
#include <memory>
#include <string>

#include "redis/deadline.h"
#include "redis/url.h"
#include "sluice/status.h"

namespace sluice::redis {

enum class IoResult {
  kOk,          // some bytes were transferred
  kWouldBlock,  // nothing now: poll for PollEvents() and try again
  kClosed,      // the peer closed the stream (Read only)
  kError,       // broken: error() says why
};

class Transport {
 public:
  virtual ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const { return fd_; }
  // Reads up to `n` bytes into `buf`; *got is how many on kOk.
  virtual IoResult Read(char* buf, std::size_t n, std::size_t* got);
  // Writes up to `n` bytes; *wrote is how many on kOk. Never raises SIGPIPE.
  virtual IoResult Write(const char* buf, std::size_t n, std::size_t* wrote);
  // True when bytes are already decrypted/buffered inside the transport, so poll()
  // would not report them: read again before polling. A plain socket has none.
  virtual bool HasBuffered() const { return false; }
  // The poll() events that let the next Read (and Write, when `want_write`) progress.
  virtual short PollEvents(bool want_write) const {
    return static_cast<short>(POLLIN | (want_write ? POLLOUT : 0));
  }
  const std::string& error() const { return error_; }

 protected:
  explicit Transport(int fd) : fd_(fd) {}
  int fd_ = -1;
  std::string error_;
};

// Connects to `url`'s first endpoint (or unix socket) by `deadline`. Errors are
// Unavailable and name the endpoint: refused, unreachable, timed out, unknown host.
// Host names are resolved with getaddrinfo (numeric addresses without a lookup; a
// name lookup is the one step not bounded by the deadline). `cancel_fd`, when >= 0,
// aborts the wait as soon as it becomes readable (a destructor's stop signal).
Result<std::unique_ptr<Transport>> Connect(const Url& url, Deadline deadline, int cancel_fd = -1);

// Waits until `fd` is ready for `events`, `deadline` passes or `cancel_fd` (if >= 0)
// is readable. False on timeout or cancel; true when ready (or on a poll error, which
// the next I/O call reports).
bool PollUntil(int fd, short events, Deadline deadline, int cancel_fd = -1);

}  // namespace sluice::redis
