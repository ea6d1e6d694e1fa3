// Internal: the Router for one server (redis://, rediss://, unix://): every command
// goes to its NodeClient; the routing key is ignored.
#pragma once

#include <memory>

#include "redis/router.h"

namespace sluice::redis {

class StandaloneRouter final : public Router {
 public:
  // Connects now (every connection of `options`); fails as NodeClient::Create.
  static Result<std::unique_ptr<StandaloneRouter>> Create(NodeOptions options);

  void Send(std::string_view routing_key, Command command, Deadline deadline,
            ReplyCallback done) override;
  void ForEachPrimary(const std::function<void(NodeClient&)>& fn) override;
  const ConnectionStats& stats() const override { return *stats_; }
  std::string Describe() const override { return node_->url().Describe(); }

 private:
  StandaloneRouter() = default;
  std::shared_ptr<ConnectionStats> stats_ = std::make_shared<ConnectionStats>();
  std::unique_ptr<NodeClient> node_;
};

}  // namespace sluice::redis
