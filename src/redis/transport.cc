#include "redis/transport.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::redis {
namespace {

class SocketTransport final : public Transport {
 public:
  explicit SocketTransport(int fd) : Transport(fd) {}
};

std::string Where(const Url& u) {
  return u.Describe();
}

// Connects one non-blocking socket to `addr` by `deadline`. Returns the fd or -1 with
// *error set.
int ConnectOne(int family, const sockaddr* addr, socklen_t len, Deadline deadline, int cancel_fd,
               std::string* error) {
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  int rc;
  do {
    rc = connect(fd, addr, len);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0 && errno != EINPROGRESS) {
    *error = strerror(errno);
    close(fd);
    return -1;
  }
  if (rc < 0) {
    if (!PollUntil(fd, POLLOUT, deadline, cancel_fd)) {
      *error = "timed out";
      close(fd);
      return -1;
    }
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) err = errno;
    if (err != 0) {
      *error = strerror(err);
      close(fd);
      return -1;
    }
  }
  if (family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

Transport::~Transport() {
  if (fd_ >= 0) close(fd_);
}

IoResult Transport::Read(char* buf, std::size_t n, std::size_t* got) {
  for (;;) {
    const ssize_t r = recv(fd_, buf, n, 0);
    if (r > 0) {
      *got = static_cast<std::size_t>(r);
      return IoResult::kOk;
    }
    if (r == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    error_ = std::string("read failed: ") + strerror(errno);
    return IoResult::kError;
  }
}

IoResult Transport::Write(const char* buf, std::size_t n, std::size_t* wrote) {
  for (;;) {
    const ssize_t r = send(fd_, buf, n, MSG_NOSIGNAL);
    if (r >= 0) {
      *wrote = static_cast<std::size_t>(r);
      return r > 0 || n == 0 ? IoResult::kOk : IoResult::kWouldBlock;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    error_ = std::string("write failed: ") + strerror(errno);
    return IoResult::kError;
  }
}

bool PollUntil(int fd, short events, Deadline deadline, int cancel_fd) {
  for (;;) {
    const Micros left = MicrosUntil(deadline);
    if (left <= 0) return false;
    pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int ms = static_cast<int>(std::min<Micros>((left + 999) / 1000, 1'000'000));
    const int rc = poll(p, cancel_fd >= 0 ? 2 : 1, ms);
    if (rc > 0 && cancel_fd >= 0 && (p[1].revents & POLLIN)) return false;
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;
  }
}

Result<std::unique_ptr<Transport>> Connect(const Url& u, Deadline deadline, int cancel_fd) {
  std::string error;
  if (u.unix_socket) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (u.path.size() >= sizeof(addr.sun_path)) {
      return Status::InvalidArgument("unix socket path too long: " + u.path);
    }
    std::memcpy(addr.sun_path, u.path.c_str(), u.path.size() + 1);
    const int fd = ConnectOne(AF_UNIX, reinterpret_cast<sockaddr*>(&addr), sizeof(addr), deadline,
                              cancel_fd, &error);
    if (fd < 0) return Status::Unavailable("cannot connect to " + Where(u) + ": " + error);
    return std::unique_ptr<Transport>(new SocketTransport(fd));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(u.port);
  const int rc = getaddrinfo(u.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return Status::Unavailable("cannot connect to " + Where(u) + ": cannot resolve '" + u.host +
                               "': " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, freeaddrinfo);
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ConnectOne(a->ai_family, a->ai_addr, a->ai_addrlen, deadline, cancel_fd, &error);
    if (fd >= 0) return std::unique_ptr<Transport>(new SocketTransport(fd));
    if (MicrosUntil(deadline) <= 0) break;
  }
  if (error == "timed out") {
    return Status::Unavailable("cannot connect to " + Where(u) + ": timed out");
  }
  return Status::Unavailable("cannot connect to " + Where(u) + ": " + error);
}

}  // namespace sluice::redis
