#include "fake_sentinel.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::testing {
namespace {

std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

void SendAll(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Result<std::unique_ptr<FakeSentinel>> FakeSentinel::Start(std::string master_name, int port,
                                                          std::string password) {
  std::unique_ptr<FakeSentinel> f(new FakeSentinel());
  f->name_ = std::move(master_name);
  f->password_ = std::move(password);
  f->primary_ = port;
  f->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (f->listen_fd_ < 0) return Status::Internal(std::string("socket: ") + strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(f->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(f->listen_fd_, 16) != 0 ||
      getsockname(f->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Status::Internal(std::string("fake sentinel: ") + strerror(errno));
  }
  f->port_ = ntohs(a.sin_port);
  f->acceptor_ = std::thread([p = f.get()] { p->Accept(); });
  return f;
}

FakeSentinel::~FakeSentinel() {
  stop_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : threads_) t.join();
  for (int fd : fds_) close(fd);
  close(listen_fd_);
}

void FakeSentinel::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    fds_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeSentinel::Serve(int fd) {
  redisReader* reader = redisReaderCreate();
  bool authenticated = password_.empty();
  char buf[4096];
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    redisReaderFeed(reader, buf, static_cast<std::size_t>(n));
    void* raw = nullptr;
    while (redisReaderGetReply(reader, &raw) == REDIS_OK && raw != nullptr) {
      auto* r = static_cast<redisReply*>(raw);
      std::vector<std::string> args;
      for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
        args.emplace_back(r->element[i]->str, r->element[i]->len);
      }
      freeReplyObject(r);
      const std::string cmd = args.empty() ? "" : Lower(args[0]);
      std::lock_guard<std::mutex> lock(mu_);  // SwitchTo writes to the same sockets
      if (cmd == "auth" && args.size() >= 2) {
        authenticated = password_.empty() || args.back() == password_;
        SendAll(fd, authenticated ? "+OK\r\n"
                                  : "-WRONGPASS invalid username-password pair or user is "
                                    "disabled.\r\n");
      } else if (cmd == "ping") {
        SendAll(fd, "+PONG\r\n");
      } else if (!authenticated) {
        SendAll(fd, "-NOAUTH Authentication required.\r\n");
      } else if (cmd == "sentinel" && args.size() == 3 &&
                 Lower(args[1]) == "get-master-addr-by-name") {
        ++asked_;
        if (args[2] != name_) {
          SendAll(fd, "*-1\r\n");
        } else {
          SendAll(fd, "*2\r\n" + Bulk("127.0.0.1") + Bulk(std::to_string(primary_.load())));
        }
      } else if (cmd == "subscribe" && args.size() == 2) {
        SendAll(fd, "*3\r\n" + Bulk("subscribe") + Bulk(args[1]) + ":1\r\n");
        subscribers_.push_back(fd);
      } else {
        SendAll(fd, "-ERR fake sentinel does not know '" + cmd + "'\r\n");
      }
    }
  }
  redisReaderFree(reader);
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(subscribers_, fd);
}

void FakeSentinel::SetPrimary(int port) {
  primary_ = port;
}

void FakeSentinel::SwitchTo(int port) {
  const int old = primary_.exchange(port);
  const std::string payload =
      name_ + " 127.0.0.1 " + std::to_string(old) + " 127.0.0.1 " + std::to_string(port);
  const std::string msg = "*3\r\n" + Bulk("message") + Bulk("+switch-master") + Bulk(payload);
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : subscribers_) SendAll(fd, msg);
}

int FakeSentinel::subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(subscribers_.size());
}

}  // namespace sluice::testing
