#include "redis/standalone_router.h"

namespace sluice::redis {

Result<std::unique_ptr<StandaloneRouter>> StandaloneRouter::Create(NodeOptions options) {
  std::unique_ptr<StandaloneRouter> r(new StandaloneRouter());
  auto node = NodeClient::Create(std::move(options), r->stats_);
  if (!node.ok()) return node.status();
  r->node_ = std::move(*node);
  return r;
}

void StandaloneRouter::Send(std::string_view, Command command, Deadline deadline,
                            ReplyCallback done) {
  node_->Send(std::move(command), deadline, std::move(done));
}

void StandaloneRouter::ForEachPrimary(const std::function<void(NodeClient&)>& fn) {
  fn(*node_);
}

}  // namespace sluice::redis
