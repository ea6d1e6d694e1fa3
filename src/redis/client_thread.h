// Internal: the Redis client's own threads (connection I/O, the completion queue, the
// cluster's refresher and timer, the sentinel watchers and resolver).
//
// Why they are marked: callbacks run on them, and a callback may hold the last reference
// to its RedisStore (a caller that captures its limiter does). The store's destructor
// joins those threads, and a thread cannot join itself; knowing it runs on one of them,
// the destructor hands the teardown to another thread instead.
#pragma once

#include <functional>
#include <thread>

namespace sluice::redis {

// Starts `body` on a new thread marked as the client's own.
std::thread StartClientThread(std::function<void()> body);

// True on a thread started by StartClientThread (of any store).
bool OnClientThread();

}  // namespace sluice::redis
