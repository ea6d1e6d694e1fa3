#include "redis/client_thread.h"

#include <utility>

namespace sluice::redis {
namespace {
thread_local bool on_client_thread = false;
}  // namespace

std::thread StartClientThread(std::function<void()> body) {
  return std::thread([body = std::move(body)] {
    on_client_thread = true;
    body();
  });
}

bool OnClientThread() {
  return on_client_thread;
}

}  // namespace sluice::redis
