// Exactness under concurrency (many_processes.h) on the shared server, or on the
// cluster (tests/cluster builds this file too).
#include <gtest/gtest.h>

#include "many_processes.h"
#include "store_backends.h"

namespace sluice::testing {
namespace {

TEST(Concurrency, ManyProcessesAndThreadsNeverExceedTheLimit) {
  auto url = FlushedRedisUrl();  // a single server, or the cluster (tests/cluster)
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  ExpectManyProcessesWithinTheLimit(*url);
}

}  // namespace
}  // namespace sluice::testing
