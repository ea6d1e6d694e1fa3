// Internal: talking to Redis Sentinel: where is MASTER's primary now, and when does it
// change. The sentinel router (sentinel_router.h) builds on these.
//
// Sentinel connections are off the decision path: a few blocking commands at startup
// and after a switch, and one subscription per sentinel. They use the data path's
// transport and handshake (TLS for rediss-sentinel://, AUTH with the sentinel
// credentials, PING), so every step is bounded by one deadline like any connection.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "redis/url.h"
#include "sluice/clock.h"
#include "sluice/status.h"

namespace sluice::redis {

// Same host and port.
inline bool SameEndpoint(const HostPort& a, const HostPort& b) {
  return a.host == b.host && a.port == b.port;
}

struct SentinelOptions {
  // Asked in order; the first that knows the master answers.
  std::vector<HostPort> sentinels;
  std::string master_name;
  // The sentinels' own credentials (sentinel_user / sentinel_password), not the data
  // nodes'. Empty password: no AUTH.
  std::string user;
  std::string password;
  // rediss-sentinel://: the sentinels are reached over TLS too, with these settings.
  TlsOptions tls;
  // Bound on connecting to one sentinel and on each command to it.
  Micros connect_timeout = 1'000'000;
};

// Asks the sentinels in order for the master's address (SENTINEL
// get-master-addr-by-name) and returns the first answer; each sentinel gets an equal
// share of what is left of `budget`, so the whole call returns within it. Errors:
// InvalidArgument when every sentinel that answered does not know `master_name` (or
// refused the credentials), Unavailable when none answered; the message names each
// sentinel and what it said.
Result<HostPort> AskSentinels(const SentinelOptions& options, Micros budget);

// Parses a +switch-master message, "<name> <old-ip> <old-port> <new-ip> <new-port>",
// into the name and the new address.
std::optional<std::pair<std::string, HostPort>> ParseSwitchMaster(std::string_view payload);

// Parses a +failover-state-wait-promotion message, "slave <ip>:<port> <ip> <port> @
// <name> <master-ip> <master-port>" (the replica a sentinel just told to become
// primary), into the name and the replica's address.
std::optional<std::pair<std::string, HostPort>> ParsePromotion(std::string_view payload);

// Follows a failover as one sentinel announces it, from a thread of its own: subscribed
// to +switch-master (the failover is over) and +failover-state-wait-promotion (the
// leader just sent REPLICAOF NO ONE to a replica: it is about to be the primary). Only
// the leading sentinel announces the promotion, and the others learn of the switch up
// to a hello period (2 s) later, so a router watches every sentinel at once. With
// several sentinels in `options`, it uses one at a time (the next when it is lost).
class SwitchWatcher {
 public:
  // `on_change` runs on the watcher's thread: with the new address when a sentinel
  // announces that `master_name` switched or is promoting a replica (check its ROLE
  // before using it), and with nullopt each time the subscription
  // is (re)established after a loss (a switch may have been missed meanwhile). It must
  // not block for long.
  using OnChange = std::function<void(const std::optional<HostPort>& address)>;
  SwitchWatcher(SentinelOptions options, OnChange on_change);
  // Stops the thread promptly (it waits on its socket and a wake-up pipe).
  ~SwitchWatcher();
  SwitchWatcher(const SwitchWatcher&) = delete;
  SwitchWatcher& operator=(const SwitchWatcher&) = delete;

  // True while a subscription is established (for tests).
  bool subscribed() const { return subscribed_.load(std::memory_order_acquire); }

 private:
  void Run();
  // Subscribes on `sentinel` and reads messages until the link breaks or Stop.
  void Watch(const HostPort& sentinel);
  // Sleeps up to `us` unless stopped; false when stopped.
  bool Pause(Micros us);

  const SentinelOptions options_;
  const OnChange on_change_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> subscribed_{false};
  std::thread thread_;
};

}  // namespace sluice::redis
