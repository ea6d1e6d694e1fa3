// The test redis-server fixture (tests/support/redis_server.h) must never hand a test
// another process's server: with suites running side by side, a port FreeLoopbackPort
// found free can be taken before the fixture's server binds it.
#include <gtest/gtest.h>

#include "redis_server.h"

namespace sluice::testing {
namespace {

TEST(RedisServerFixture, APortAnotherServerHoldsIsRefusedNotShared) {
  auto other = RedisServer::Start();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  RedisServerOptions same;
  same.port = (*other)->port();  // the race made certain: the port is taken
  auto mine = RedisServer::Start(same);
  EXPECT_FALSE(mine.ok()) << "Start answered with the other process's server";
  // The other server is untouched.
  auto pong = (*other)->Command({"PING"});
  ASSERT_TRUE(pong.ok()) << pong.status().ToString();
  EXPECT_EQ(pong->str, "PONG");
}

}  // namespace
}  // namespace sluice::testing
