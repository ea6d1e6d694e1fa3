#include "redis/cluster_router.h"

#include <algorithm>

#include "redis/client_thread.h"

namespace sluice::redis {
namespace {

// Backoff before resending after TRYAGAIN / CLUSTERDOWN / LOADING / READONLY:
// 1, 2, 4, 8, 16 ms (a migration or an election settles in milliseconds to a second;
// the call's deadline bounds it anyway).
std::chrono::microseconds Backoff(int attempt) {
  return std::chrono::microseconds(1000LL << std::min(attempt, 4));
}

// A server too old for a command or subcommand (CLUSTER SHARDS before Redis 7). Not
// connection.h's IsRefusedCommand, which tells a module's command refused unrun only.
bool IsUnsupported(const Reply& r) {
  return r.is_error() && (r.str.find("unknown subcommand") != std::string::npos ||
                          r.str.find("unknown command") != std::string::npos);
}

bool IsClusterDisabled(const Reply& r) {
  return r.is_error() && r.str.find("cluster support disabled") != std::string::npos;
}

}  // namespace

ClusterRouter::ClusterRouter(NodeOptions options) : options_(std::move(options)) {
  for (auto& o : owner_) o.store(SlotMap::kNoNode, std::memory_order_relaxed);
}

Result<std::unique_ptr<ClusterRouter>> ClusterRouter::Create(NodeOptions options) {
  if (options.connect.url().endpoints.empty()) {
    return Status::InvalidArgument("a Redis Cluster URL needs at least one seed host:port");
  }
  std::unique_ptr<ClusterRouter> r(new ClusterRouter(std::move(options)));
  if (Status s = r->Refresh(/*for_create=*/true); !s.ok()) {
    // Degraded start (connect_now false): no seed reachable, or a cluster that does
    // not serve every slot yet, is an outage, not a start error. The router starts
    // with what it has (possibly no map: every call fails at once, the failure mode
    // decides) and the refresh thread keeps reading the map until it succeeds. A seed
    // that answers but refuses (not a cluster, wrong password) is still an error.
    if (r->options_.connect_now || s.code() != ErrorCode::kUnavailable) return s;
    r->refresh_requested_ = true;
  }
  r->refresher_ = StartClientThread([p = r.get()] { p->RefreshLoop(); });
  r->timer_ = StartClientThread([p = r.get()] { p->TimerLoop(); });
  return r;
}

ClusterRouter::~ClusterRouter() {
  closing_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  refresh_cv_.notify_all();
  timer_cv_.notify_all();
  if (refresher_.joinable()) refresher_.join();
  if (timer_.joinable()) timer_.join();
  for (auto& [when, retry] : timers_) {
    retry.call->done(Status::Unavailable("the Redis client is shutting down"), nullptr);
  }
  timers_.clear();
  // Closing the nodes fails their calls in flight; OnReply then only calls `done`
  // (closing_). Destroyed outside the lock: an I/O thread being joined may still be
  // in a callback that looks a node up.
  std::vector<std::unique_ptr<NodeClient>> clients;
  {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    for (auto& n : owned_nodes_) {
      n->client.store(nullptr, std::memory_order_release);
      clients.push_back(std::move(n->owned));
    }
  }
  clients.clear();
}

std::string ClusterRouter::Describe() const {
  return options_.connect.url().Describe();
}

NodeOptions ClusterRouter::OptionsFor(const Endpoint& e) const {
  NodeOptions o = options_;
  Url& url = o.connect.handshake.url;
  url.host = e.host;
  url.port = e.port;
  url.endpoints = {HostPort{e.host, e.port}};
  url.db = 0;  // a cluster has one database
  return o;
}

int ClusterRouter::NodeIndex(const Endpoint& e) {
  const int n = node_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (nodes_[static_cast<std::size_t>(i)].load(std::memory_order_acquire)->endpoint == e) {
      return i;
    }
  }
  std::lock_guard<std::mutex> lock(nodes_mu_);
  const int m = node_count_.load(std::memory_order_acquire);
  for (int i = n; i < m; ++i) {
    if (nodes_[static_cast<std::size_t>(i)].load(std::memory_order_acquire)->endpoint == e) {
      return i;
    }
  }
  if (m >= kMaxNodes) return -1;
  auto node = std::make_unique<Node>();
  node->endpoint = e;
  nodes_[static_cast<std::size_t>(m)].store(node.get(), std::memory_order_release);
  owned_nodes_.push_back(std::move(node));
  node_count_.store(m + 1, std::memory_order_release);
  return m;
}

NodeClient* ClusterRouter::ClientOf(int index) const {
  if (index < 0 || index >= node_count_.load(std::memory_order_acquire)) return nullptr;
  return nodes_[static_cast<std::size_t>(index)]
      .load(std::memory_order_acquire)
      ->client.load(std::memory_order_acquire);
}

Result<SlotMap> ClusterRouter::FetchMap(Deadline deadline, bool* not_cluster, std::string* why) {
  auto ask = [&](NodeClient& c, const Endpoint& where) -> std::optional<SlotMap> {
    auto shards = c.Call(Command{EncodeCommand({"CLUSTER", "SHARDS"}), {}}, deadline);
    if (!shards.ok()) {
      *why = where.ToString() + ": " + shards.status().message();
      return std::nullopt;
    }
    Result<SlotMap> map = Status::Internal("");
    if (IsUnsupported(*shards)) {  // Redis < 7: CLUSTER SLOTS
      auto slots = c.Call(Command{EncodeCommand({"CLUSTER", "SLOTS"}), {}}, deadline);
      if (!slots.ok()) {
        *why = where.ToString() + ": " + slots.status().message();
        return std::nullopt;
      }
      if (IsClusterDisabled(*slots)) *not_cluster = true;
      map = ParseClusterSlots(*slots, where.host);
    } else {
      if (IsClusterDisabled(*shards)) *not_cluster = true;
      map = ParseClusterShards(*shards, where.host, options_.connect.url().tls.enabled);
    }
    if (!map.ok()) {
      *why = where.ToString() + ": " + map.status().message();
      return std::nullopt;
    }
    return std::move(*map);
  };
  // Known primaries first: they are connected already.
  const int n = node_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n && SteadyClock::now() < deadline; ++i) {
    NodeClient* c = ClientOf(i);
    if (c == nullptr || !c->connected()) continue;
    if (auto m = ask(*c, nodes_[static_cast<std::size_t>(i)].load()->endpoint)) return *m;
  }
  // Then the seeds, each on a connection of its own.
  for (const HostPort& seed : options_.connect.url().endpoints) {
    if (SteadyClock::now() >= deadline) break;
    const Endpoint e{seed.host, seed.port};
    NodeOptions o = OptionsFor(e);
    o.connections = 1;
    o.connect.handshake.scripts.clear();
    auto c = NodeClient::Create(std::move(o), std::make_shared<ConnectionStats>());
    if (!c.ok()) {
      *why = c.status().message();
      if (c.status().code() == ErrorCode::kInvalidArgument) return c.status();  // bad password
      continue;
    }
    if (auto m = ask(**c, e)) return *m;
    if (*not_cluster) break;
  }
  return Status::Unavailable(*why);
}

Status ClusterRouter::Refresh(bool for_create) {
  const Micros timeout = options_.connect.handshake.connect_timeout;
  bool not_cluster = false;
  std::string why = "no node answered";
  // A refresh may have to try several nodes: allow it a few connect timeouts.
  auto map = FetchMap(DeadlineAfter(3 * timeout), &not_cluster, &why);
  stats_->topology_refreshes.fetch_add(1, std::memory_order_relaxed);
  if (!map.ok()) {
    if (not_cluster) {
      return Status::InvalidArgument("the seed " + why +
                                     " is not a Redis Cluster node (use redis:// for one server)");
    }
    if (map.status().code() == ErrorCode::kInvalidArgument) {  // refused: wrong password...
      return Status::InvalidArgument("cannot read the cluster's slot map from " + Describe() +
                                     ": " + map.status().message());
    }
    return Status::Unavailable("cannot read the cluster's slot map from " + Describe() + ": " +
                               map.status().message());
  }
  if (for_create && map->uncovered() > 0) {
    return Status::Unavailable("the cluster at " + Describe() + " does not serve " +
                               std::to_string(map->uncovered()) +
                               " of the 16384 slots (cluster_state is not ok)");
  }
  // Connect to every primary of the map that has no client yet.
  std::vector<int> index(map->primaries().size(), -1);
  Status failed = Status::Ok();
  for (std::size_t p = 0; p < map->primaries().size(); ++p) {
    const Endpoint& e = map->primaries()[p];
    const int i = NodeIndex(e);
    if (i < 0) return Status::ResourceExhausted("too many cluster nodes");
    index[p] = i;
    if (ClientOf(i) != nullptr) continue;
    auto client = NodeClient::Create(OptionsFor(e), stats_);
    if (!client.ok()) {
      failed = Status(client.status().code(), "cannot connect to cluster primary " + e.ToString() +
                                                  ": " + client.status().message());
      continue;
    }
    std::lock_guard<std::mutex> lock(nodes_mu_);
    Node* node = nodes_[static_cast<std::size_t>(i)].load(std::memory_order_acquire);
    node->owned = std::move(*client);
    node->client.store(node->owned.get(), std::memory_order_release);
  }
  if (for_create && !failed.ok()) return failed;
  for (int s = 0; s < kClusterSlots; ++s) {
    const std::uint16_t o = map->owner(s);
    if (o == SlotMap::kNoNode) continue;
    owner_[static_cast<std::size_t>(s)].store(static_cast<std::uint16_t>(index[o]),
                                              std::memory_order_release);
  }
  if (!failed.ok()) return failed;
  return Status::Ok();
}

void ClusterRouter::RequestRefresh() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (refresh_requested_) return;
    refresh_requested_ = true;
  }
  refresh_cv_.notify_one();
}

void ClusterRouter::RefreshLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  auto last = SteadyClock::now() - kMinRefreshGap;
  while (!stop_) {
    refresh_cv_.wait(lock, [&] { return stop_ || refresh_requested_; });
    if (stop_) break;
    // Collapse bursts (every MOVED of a migration asks): at most one refresh per gap.
    refresh_cv_.wait_until(lock, last + kMinRefreshGap, [&] { return stop_; });
    if (stop_) break;
    refresh_requested_ = false;
    lock.unlock();
    const Status s = Refresh(/*for_create=*/false);
    last = SteadyClock::now();
    lock.lock();
    // A primary that could not be reached (a failover in progress): try again.
    if (!s.ok()) refresh_requested_ = true;
  }
}

void ClusterRouter::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (timers_.empty()) {
      timer_cv_.wait(lock, [&] { return stop_ || !timers_.empty(); });
      continue;
    }
    const Deadline next = timers_.begin()->first;
    if (SteadyClock::now() < next) {
      timer_cv_.wait_until(lock, next);
      continue;
    }
    Retry r = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    lock.unlock();
    const int node =
        r.node >= 0
            ? r.node
            : owner_[static_cast<std::size_t>(r.call->slot)].load(std::memory_order_acquire);
    Dispatch(std::move(r.call), node, r.asking);
    lock.lock();
  }
}

void ClusterRouter::Send(std::string_view routing_key, Command command, Deadline deadline,
                         ReplyCallback done) {
  auto call = std::make_shared<Call>();
  call->slot = KeySlot(routing_key);
  call->wire = std::move(command.wire);
  call->script = command.script;
  call->coalesce = command.coalesce;
  call->module_wire = std::move(command.module_wire);
  call->deadline = deadline;
  call->done = std::move(done);
  const int node = owner_[static_cast<std::size_t>(call->slot)].load(std::memory_order_acquire);
  Dispatch(std::move(call), node, false);
}

void ClusterRouter::Dispatch(std::shared_ptr<Call> call, int node, bool asking) {
  NodeClient* c = ClientOf(node);
  const int known = node_count_.load(std::memory_order_acquire);
  if (c == nullptr && known > 0 && !closing_.load(std::memory_order_acquire)) {
    // Either the node is known but has no client yet (the refresh thread connects to
    // every primary of the map, never this thread: connecting blocks), or the map read
    // so far does not cover the slot (a cluster still forming, as in a degraded start:
    // what Redis answers CLUSTERDOWN for). Resend once the refresh is done, to the
    // slot's owner then (-1) when it had none; the wait is bounded by the deadline only
    // (how long a connect or a refresh takes on a loaded machine is not a number of
    // attempts), and fails below when the deadline does not allow it. With no map at
    // all (known == 0: no seed ever answered) the call fails at once.
    RequestRefresh();
    const bool owned = node >= 0 && node < known;
    if (Schedule(call, owned ? node : -1, asking, Backoff(call->waits++))) return;
  }
  if (c == nullptr || !c->connected()) {
    // Nothing is sent: the caller's failure mode decides, and the map is refreshed
    // (the primary may have failed over).
    unreachable_.fetch_add(1, std::memory_order_relaxed);
    RequestRefresh();
    const std::string where =
        node >= 0 && node < node_count_.load(std::memory_order_acquire)
            ? nodes_[static_cast<std::size_t>(node)].load()->endpoint.ToString()
            : std::string("no known node");
    call->done(Status::Unavailable("no connection to the cluster primary for slot " +
                                   std::to_string(call->slot) + " (" + where + ")"),
               nullptr);
    return;
  }
  auto on_reply = [this, call, node](const Status& s, const redisReply* r) {
    OnReply(call, node, s, r);
  };
  if (!asking) {
    // The script is left out of the Command: NOSCRIPT is handled here (OnReply), with
    // the wire this call keeps anyway for redirects, so the node does not keep a
    // second copy of every command (a measurable part of the client's CPU per call).
    // Only calls of one slot share a coalesced call (CoalesceInfo::slot), which a MOVED
    // then redirects as a whole: each caller's call is resent on its own.
    c->Send(Command{call->wire, {}, call->coalesce, call->module_wire}, call->deadline,
            std::move(on_reply));
    return;
  }
  // ASKING lets the next command on this connection touch the importing slot. The
  // target may not have the script: load it first, on the same connection.
  std::string wire;
  std::vector<ReplyCallback> cbs;
  if (!call->script.empty()) {
    wire = EncodeCommand({"SCRIPT", "LOAD", call->script});
    cbs.push_back([](const Status&, const redisReply*) {});  // the command's reply tells
  }
  wire += EncodeCommand({"ASKING"});
  cbs.push_back([](const Status&, const redisReply*) {});
  wire += call->wire;
  cbs.push_back(std::move(on_reply));
  c->SendPipeline(std::move(wire), call->deadline, std::move(cbs));
}

void ClusterRouter::RetryLater(const std::shared_ptr<Call>& call, int node,
                               std::chrono::microseconds delay, const Status& s,
                               const redisReply* r) {
  // No time left, or stopping: the error reply is the caller's.
  if (!Schedule(call, node, false, delay)) call->done(s, r);
}

bool ClusterRouter::Schedule(const std::shared_ptr<Call>& call, int node, bool asking,
                             std::chrono::microseconds delay) {
  const Deadline when = SteadyClock::now() + delay;
  if (when >= call->deadline) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    timers_.emplace(when, Retry{call, node, asking});
  }
  stats_->cluster_retries.fetch_add(1, std::memory_order_relaxed);
  timer_cv_.notify_one();
  return true;
}

void ClusterRouter::OnReply(const std::shared_ptr<Call>& call, int node, const Status& s,
                            const redisReply* r) {
  // A failure (timeout, connection lost) may have run the command: never resent.
  if (!s.ok()) {
    call->done(s, r);
    return;
  }
  const ErrorKind kind = Classify(r);
  const bool module_gone = !call->module_wire.empty() && IsRefusedCommand(r);
  if (module_gone) call->module_wire.clear();  // (and its connection stops sending it)
  if ((kind == ErrorKind::kNoScript || module_gone) && !call->script.empty() &&
      !call->script_reloaded && SteadyClock::now() < call->deadline &&
      !closing_.load(std::memory_order_acquire)) {
    // This node lost the script (restart, failover, SCRIPT FLUSH) or the module, which
    // proves it did not run: load the script and resend once, pipelined on one
    // connection so the load comes first. A second NOSCRIPT is the caller's.
    if (NodeClient* c = ClientOf(node)) {
      call->script_reloaded = true;
      stats_->script_reloads.fetch_add(1, std::memory_order_relaxed);
      std::string both = EncodeCommand({"SCRIPT", "LOAD", call->script});
      both += call->wire;
      std::vector<ReplyCallback> cbs;
      cbs.push_back([](const Status&, const redisReply*) {});  // the resend's reply tells
      cbs.push_back([this, call, node](const Status& s2, const redisReply* r2) {
        OnReply(call, node, s2, r2);
      });
      c->SendPipeline(std::move(both), call->deadline, std::move(cbs));
      return;
    }
  }
  switch (kind) {
    case ErrorKind::kMoved:
    case ErrorKind::kAsk:
    case ErrorKind::kTryAgain:
    case ErrorKind::kClusterDown:
    case ErrorKind::kLoading:
    case ErrorKind::kReadOnly:
      break;
    default:  // a result, or an error that is the caller's (NOSCRIPT after a reload too)
      call->done(s, r);
      return;
  }
  if (call->redirects >= kMaxRedirects || SteadyClock::now() >= call->deadline ||
      closing_.load(std::memory_order_acquire)) {
    call->done(s, r);
    return;
  }
  ++call->redirects;
  if (kind == ErrorKind::kMoved || kind == ErrorKind::kAsk) {
    Redirect redirect;
    if (!ParseRedirect(std::string_view(r->str, r->len), &redirect)) {
      call->done(s, r);
      return;
    }
    // ":port" (a node that does not know its address): the answering node's host.
    const std::string host = redirect.host.empty() && node >= 0
                                 ? nodes_[static_cast<std::size_t>(node)].load()->endpoint.host
                                 : redirect.host;
    const int target = NodeIndex(Endpoint{host, redirect.port});
    if (target < 0) {
      call->done(s, r);
      return;
    }
    if (kind == ErrorKind::kMoved) {
      stats_->moved.fetch_add(1, std::memory_order_relaxed);
      if (redirect.slot >= 0 && redirect.slot < kClusterSlots) {
        owner_[static_cast<std::size_t>(redirect.slot)].store(static_cast<std::uint16_t>(target),
                                                              std::memory_order_release);
      }
      RequestRefresh();
      Dispatch(call, target, false);
    } else {
      stats_->ask.fetch_add(1, std::memory_order_relaxed);
      Dispatch(call, target, true);
    }
    return;
  }
  if (kind == ErrorKind::kReadOnly || kind == ErrorKind::kClusterDown) RequestRefresh();
  // Resend to whoever owns the slot by then (-1), after a short backoff.
  RetryLater(call, -1, Backoff(call->redirects - 1), s, r);
}

void ClusterRouter::ForEachPrimary(const std::function<void(NodeClient&)>& fn) {
  std::vector<bool> is_owner(static_cast<std::size_t>(node_count_.load()), false);
  for (const auto& o : owner_) {
    const std::uint16_t i = o.load(std::memory_order_acquire);
    if (i < is_owner.size()) is_owner[i] = true;
  }
  for (std::size_t i = 0; i < is_owner.size(); ++i) {
    NodeClient* c = ClientOf(static_cast<int>(i));
    if (is_owner[i] && c != nullptr) fn(*c);
  }
}

ClusterStats ClusterRouter::cluster_stats() const {
  ClusterStats s;
  s.moved = stats_->moved.load(std::memory_order_relaxed);
  s.ask = stats_->ask.load(std::memory_order_relaxed);
  s.retries = stats_->cluster_retries.load(std::memory_order_relaxed);
  s.refreshes = stats_->topology_refreshes.load(std::memory_order_relaxed);
  s.unreachable = unreachable_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice::redis
