// A scripted sentinel for tests that need Sentinel's answers exactly when they want
// them (a real group decides on its own schedule): it listens on a free loopback port,
// answers AUTH, PING and `SENTINEL get-master-addr-by-name` with the address the test
// sets, accepts SUBSCRIBE, and publishes +switch-master when the test says so.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/status.h"

namespace sluice::testing {

class FakeSentinel {
 public:
  // Serves `master_name` at 127.0.0.1:`port` until told otherwise. With a `password`,
  // commands other than AUTH/PING need `AUTH password` first (any user name).
  static Result<std::unique_ptr<FakeSentinel>> Start(std::string master_name, int port,
                                                     std::string password = "");
  ~FakeSentinel();
  FakeSentinel(const FakeSentinel&) = delete;
  FakeSentinel& operator=(const FakeSentinel&) = delete;

  int port() const { return port_; }
  // What get-master-addr-by-name answers from now on (no announcement).
  void SetPrimary(int port);
  // SetPrimary, and publishes "+switch-master NAME 127.0.0.1 OLD 127.0.0.1 NEW" to every
  // subscriber.
  void SwitchTo(int port);
  // Number of connections currently subscribed.
  int subscribers() const;
  // Number of get-master-addr-by-name requests answered.
  int asked() const { return asked_.load(); }

 private:
  FakeSentinel() = default;
  void Accept();
  void Serve(int fd);

  std::string name_;
  std::string password_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> primary_{0};
  std::atomic<int> asked_{0};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<int> subscribers_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace sluice::testing
