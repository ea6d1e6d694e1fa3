#include "redis/sentinel_router.h"

#include <algorithm>

#include "redis/client_thread.h"
#include "redis/reply.h"
#include "redis/resp.h"

namespace sluice::redis {
namespace {}  // namespace

Result<std::shared_ptr<NodeClient>> SentinelRouter::Connect(const HostPort& at) const {
  NodeOptions no = options_.node;
  Url& u = no.connect.handshake.url;
  u.topology = Topology::kStandalone;
  u.unix_socket = false;
  u.host = at.host;
  u.port = at.port;
  u.endpoints = {at};
  u.master_name.clear();
  u.sentinel_user.clear();
  u.sentinel_password.clear();
  auto node = NodeClient::Create(no, stats_);
  if (!node.ok()) return node.status();
  std::shared_ptr<NodeClient> c = std::move(*node);
  auto role = c->Call(Command{EncodeCommand({"ROLE"}), {}},
                      DeadlineAfter(no.connect.handshake.connect_timeout));
  if (!role.ok()) {
    return Status::Unavailable("the sentinels report " + at.Describe() + " as the primary of '" +
                               options_.sentinel.master_name +
                               "', but ROLE failed: " + role.status().message());
  }
  if (role->is_error()) {
    return Status::Unavailable("the sentinels report " + at.Describe() + " as the primary of '" +
                               options_.sentinel.master_name + "', but ROLE failed: " + role->str +
                               " (an ACL user needs +role)");
  }
  const std::string what = role->elements.empty() ? "nothing" : role->elements[0].str;
  if (what != "master") {
    return Status::Unavailable("the sentinels report " + at.Describe() + " as the primary of '" +
                               options_.sentinel.master_name + "', but it is not a master (ROLE " +
                               "answered " + what + ")");
  }
  return c;
}

Result<std::unique_ptr<SentinelRouter>> SentinelRouter::Create(SentinelRouterOptions options) {
  std::unique_ptr<SentinelRouter> r(new SentinelRouter(std::move(options)));
  const Micros budget = r->options_.node.connect.handshake.connect_timeout;
  auto at = AskSentinels(r->options_.sentinel, budget);
  if (!at.ok()) return at.status();
  auto node = r->Connect(*at);
  if (!node.ok()) return node.status();
  r->node_ = std::move(*node);
  r->primary_ = *at;
  r->resolver_ = StartClientThread([p = r.get()] { p->Resolve(); });
  for (const HostPort& s : r->options_.sentinel.sentinels) {
    SentinelOptions one = r->options_.sentinel;
    one.sentinels = {s};
    r->watchers_.push_back(std::make_unique<SwitchWatcher>(
        std::move(one), [p = r.get()](const std::optional<HostPort>& a) { p->Trigger(a); }));
  }
  return r;
}

SentinelRouter::~SentinelRouter() {
  watchers_.clear();  // their callbacks use this router
  {
    std::lock_guard<std::mutex> lock(resolve_mu_);
    stop_ = true;
  }
  resolve_cv_.notify_all();
  if (resolver_.joinable()) resolver_.join();
  std::shared_ptr<NodeClient> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last.swap(node_);
  }
  last.reset();  // calls in flight complete (Unavailable); Trigger is a no-op by now
}

std::shared_ptr<NodeClient> SentinelRouter::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_;
}

HostPort SentinelRouter::primary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return primary_;
}

// A lost connection (Unavailable) or READONLY: the primary may have moved.
ReplyCallback SentinelRouter::Watch(ReplyCallback cb) {
  return [this, cb = std::move(cb)](const Status& s, const redisReply* r) {
    if (s.code() == ErrorCode::kUnavailable || (s.ok() && Classify(r) == ErrorKind::kReadOnly)) {
      Trigger(std::nullopt);
    }
    cb(s, r);
  };
}

void SentinelRouter::Send(std::string_view, Command command, Deadline deadline,
                          ReplyCallback done) {
  std::shared_ptr<NodeClient> node = Current();
  node->Send(std::move(command), deadline, Watch(std::move(done)));
}

void SentinelRouter::ForEachPrimary(const std::function<void(NodeClient&)>& fn) {
  std::shared_ptr<NodeClient> node = Current();
  fn(*node);
}

void SentinelRouter::Trigger(std::optional<HostPort> address) {
  {
    std::lock_guard<std::mutex> lock(resolve_mu_);
    if (stop_) return;
    pending_ = true;
    if (address) announced_ = std::move(address);
  }
  resolve_cv_.notify_one();
}

void SentinelRouter::Resolve() {
  const Micros connect_timeout = options_.node.connect.handshake.connect_timeout;
  // An announced address is tried until its ROLE says master (a promotion takes a few
  // milliseconds) or this long has passed; then the sentinels are asked again.
  constexpr auto kCandidateFor = std::chrono::seconds(10);
  std::optional<HostPort> candidate;
  SteadyClock::time_point candidate_until;
  // After moving on an announcement, the sentinels that were not leading still report
  // the old primary for a while (until the leader's hello reaches them), and the old
  // primary still says it is master until Sentinel demotes it: asking then must not
  // move the store back. For this long the announced primary is kept while it says it
  // is master; then the sentinels are believed again.
  constexpr auto kAnnouncedHold = std::chrono::seconds(10);
  std::optional<HostPort> announced_primary;
  SteadyClock::time_point hold_until;
  Micros backoff = 50'000;
  std::unique_lock<std::mutex> lock(resolve_mu_);
  for (;;) {
    resolve_cv_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    pending_ = false;
    if (announced_) {
      candidate = std::move(announced_);
      announced_.reset();
      candidate_until = SteadyClock::now() + kCandidateFor;
    }
    if (candidate && SteadyClock::now() > candidate_until) candidate.reset();
    lock.unlock();

    bool settled = false;
    Result<HostPort> at =
        candidate ? Result<HostPort>(*candidate) : AskSentinels(options_.sentinel, connect_timeout);
    std::shared_ptr<NodeClient> retired;
    const bool holding = !candidate && announced_primary &&
                         SameEndpoint(*announced_primary, primary()) &&
                         SteadyClock::now() < hold_until;
    auto current_is_master = [&] {
      auto role =
          Current()->Call(Command{EncodeCommand({"ROLE"}), {}}, DeadlineAfter(connect_timeout));
      return role.ok() && !role->is_error() && !role->elements.empty() &&
             role->elements[0].str == "master";
    };
    if (at.ok() && holding && !SameEndpoint(*at, primary())) {
      // The sentinels lag the announcement (see kAnnouncedHold): stay while it is master.
      settled = current_is_master();
    } else if (at.ok()) {
      if (SameEndpoint(*at, primary())) {
        // Same node: fine if it still is a master (its connections reconnect by
        // themselves); if it is not, the sentinels have not switched yet: ask again.
        settled = current_is_master();
      } else if (auto next = Connect(*at); next.ok()) {
        std::lock_guard<std::mutex> g(mu_);
        retired = std::move(node_);
        node_ = std::move(*next);
        primary_ = *at;
        switches_.fetch_add(1, std::memory_order_relaxed);
        settled = true;
      }
    }
    retired.reset();  // outside every lock: its calls in flight complete now

    lock.lock();
    if (settled) {
      if (candidate) {
        announced_primary = candidate;
        hold_until = SteadyClock::now() + kAnnouncedHold;
      }
      candidate.reset();
      backoff = 50'000;
      continue;
    }
    // Not there yet (a promotion in progress, the sentinels still report the lost
    // node, or it is not a master): try again after a pause, at once if a switch is
    // announced meanwhile.
    const Micros pause = candidate ? 10'000 : backoff;
    resolve_cv_.wait_for(lock, std::chrono::microseconds(pause),
                         [&] { return stop_ || announced_.has_value(); });
    if (!candidate) backoff = std::min<Micros>(backoff * 2, 1'000'000);
    pending_ = true;
  }
}

}  // namespace sluice::redis
