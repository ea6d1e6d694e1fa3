// One local cluster per test binary, started on first use; a failure to start fails
// every test using it. For tests that leave the cluster as they found it.
#pragma once

#include <gtest/gtest.h>

#include "redis_cluster.h"

namespace sluice::testing {

inline RedisCluster* SharedTestCluster() {
  static Result<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start();
  if (!cluster.ok()) {
    ADD_FAILURE() << "cannot start a Redis Cluster: " << cluster.status().ToString();
    return nullptr;
  }
  return cluster->get();
}

}  // namespace sluice::testing
