#include "redis/sentinel.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>

namespace sluice::redis {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(void* r) const { freeReplyObject(r); }
};
using Context = std::unique_ptr<redisContext, ContextFree>;
using ReplyOwner = std::unique_ptr<redisReply, ReplyFree>;

timeval ToTimeval(Micros us) {
  us = std::max<Micros>(us, 1000);
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

Micros MicrosLeft(SteadyClock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::microseconds>(deadline - SteadyClock::now())
      .count();
}

std::string ReplyText(const redisReply* r) {
  return r->str != nullptr ? std::string(r->str, r->len) : std::string();
}

bool IsAuthError(std::string_view e) {
  return e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") || e.starts_with("NOPERM") ||
         e.find("invalid password") != std::string_view::npos;
}

// A blocking connection to one sentinel, authenticated; every step bounded by
// `deadline` (connect, and each read or write through the socket timeouts).
Result<Context> Dial(const SentinelOptions& o, const HostPort& s,
                     SteadyClock::time_point deadline) {
  const Micros left = MicrosLeft(deadline);
  if (left <= 0) return Status::DeadlineExceeded("no time left to ask it");
  Context c(redisConnectWithTimeout(s.host.c_str(), s.port, ToTimeval(left)));
  if (!c) return Status::Unavailable("out of memory");
  if (c->err) return Status::Unavailable(c->errstr);
  if (!o.password.empty()) {
    redisSetTimeout(c.get(), ToTimeval(MicrosLeft(deadline)));
    std::vector<const char*> argv = {"AUTH"};
    std::vector<std::size_t> lens = {4};
    if (!o.user.empty()) {
      argv.push_back(o.user.data());
      lens.push_back(o.user.size());
    }
    argv.push_back(o.password.data());
    lens.push_back(o.password.size());
    ReplyOwner r(static_cast<redisReply*>(
        redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) return Status::Unavailable(c->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
      return Status::InvalidArgument("authentication failed (sentinel_user/sentinel_password): " +
                                     ReplyText(r.get()));
    }
  }
  return c;
}

// Blocks SIGPIPE on this thread for the scope (a sentinel may close the socket while
// we write); a SIGPIPE raised meanwhile is discarded.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (sigismember(&old_, SIGPIPE)) return;
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

}  // namespace

std::string HostPort::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> AskSentinels(const SentinelOptions& o, Micros budget) {
  NoSigpipe no_sigpipe;
  const auto deadline = SteadyClock::now() + std::chrono::microseconds(budget);
  std::string notes;
  bool answered = false;  // some sentinel answered, but not with an address
  for (std::size_t i = 0; i < o.sentinels.size(); ++i) {
    const HostPort& s = o.sentinels[i];
    // An equal share of what is left for each sentinel not yet asked, so one that
    // does not answer cannot use up the time of the others.
    const Micros share = std::min(
        o.connect_timeout, MicrosLeft(deadline) / static_cast<Micros>(o.sentinels.size() - i));
    const auto until = SteadyClock::now() + std::chrono::microseconds(std::max<Micros>(share, 0));
    if (!notes.empty()) notes += "; ";
    notes += s.ToString() + ": ";
    auto c = Dial(o, s, until);
    if (!c.ok()) {
      if (c.status().code() == ErrorCode::kInvalidArgument) answered = true;
      notes += c.status().message();
      continue;
    }
    redisSetTimeout(c->get(), ToTimeval(MicrosLeft(until)));
    const char* argv[] = {"SENTINEL", "get-master-addr-by-name", o.master_name.c_str()};
    const std::size_t lens[] = {8, 23, o.master_name.size()};
    ReplyOwner r(static_cast<redisReply*>(redisCommandArgv(c->get(), 3, argv, lens)));
    if (!r) {
      notes += (*c)->errstr[0] != '\0' ? std::string((*c)->errstr) : "no answer";
      continue;
    }
    answered = true;
    if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
      notes += "does not know a master named '" + o.master_name + "'";
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string e = ReplyText(r.get());
      notes += (IsAuthError(e) ? "refused (sentinel_user/sentinel_password?): " : "answered: ") + e;
      continue;
    }
    int port = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
      const std::string p = ReplyText(r->element[1]);
      auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
      if (ec == std::errc() && end == p.data() + p.size() && port > 0 && port < 65536) {
        return HostPort{ReplyText(r->element[0]), port};
      }
    }
    notes += "answered something that is not an address";
  }
  const std::string what =
      "no sentinel gave the address of master '" + o.master_name + "' (" + notes + ")";
  if (o.sentinels.empty()) return Status::InvalidArgument("no sentinel to ask");
  return answered ? Status::InvalidArgument(what) : Status::Unavailable(what);
}

std::optional<std::pair<std::string, HostPort>> ParseSwitchMaster(std::string_view payload) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start < payload.size()) {
    std::size_t end = payload.find(' ', start);
    if (end == std::string_view::npos) end = payload.size();
    if (end > start) parts.push_back(payload.substr(start, end - start));
    start = end + 1;
  }
  if (parts.size() != 5) return std::nullopt;
  int port = 0;
  auto [end, ec] = std::from_chars(parts[4].data(), parts[4].data() + parts[4].size(), port);
  if (ec != std::errc() || end != parts[4].data() + parts[4].size() || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return std::make_pair(std::string(parts[0]), HostPort{std::string(parts[3]), port});
}

std::optional<std::pair<std::string, HostPort>> ParsePromotion(std::string_view payload) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start < payload.size()) {
    std::size_t end = payload.find(' ', start);
    if (end == std::string_view::npos) end = payload.size();
    if (end > start) parts.push_back(payload.substr(start, end - start));
    start = end + 1;
  }
  if (parts.size() != 8 || parts[0] != "slave" || parts[4] != "@") return std::nullopt;
  int port = 0;
  auto [end, ec] = std::from_chars(parts[3].data(), parts[3].data() + parts[3].size(), port);
  if (ec != std::errc() || end != parts[3].data() + parts[3].size() || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return std::make_pair(std::string(parts[5]), HostPort{std::string(parts[2]), port});
}

SwitchWatcher::SwitchWatcher(SentinelOptions options, OnChange on_change)
    : options_(std::move(options)), on_change_(std::move(on_change)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { Run(); });
}

SwitchWatcher::~SwitchWatcher() {
  stop_.store(true, std::memory_order_release);
  if (wake_[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] auto n = write(wake_[1], &b, 1);
  }
  if (thread_.joinable()) thread_.join();
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

bool SwitchWatcher::Pause(Micros us) {
  pollfd p{wake_[0], POLLIN, 0};
  poll(&p, 1, static_cast<int>(us / 1000));
  return !stop_.load(std::memory_order_acquire);
}

void SwitchWatcher::Run() {
  // Our own thread: SIGPIPE stays blocked for its whole life.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  if (options_.sentinels.empty() || wake_[0] < 0) return;
  std::size_t next = 0;
  Micros backoff = 50'000;
  while (!stop_.load(std::memory_order_acquire)) {
    Watch(options_.sentinels[next]);
    if (subscribed_.exchange(false)) backoff = 50'000;  // it worked for a while
    next = (next + 1) % options_.sentinels.size();
    // After trying every sentinel once, back off (up to 1 s) before the next round.
    if (next == 0) {
      if (!Pause(backoff)) return;
      backoff = std::min<Micros>(backoff * 2, 1'000'000);
    }
  }
}

void SwitchWatcher::Watch(const HostPort& sentinel) {
  const auto until = SteadyClock::now() + std::chrono::microseconds(options_.connect_timeout);
  auto c = Dial(options_, sentinel, until);
  if (!c.ok()) return;
  redisContext* ctx = c->get();
  redisSetTimeout(ctx, ToTimeval(MicrosLeft(until)));
  ReplyOwner sub(static_cast<redisReply*>(
      redisCommand(ctx, "SUBSCRIBE +switch-master +failover-state-wait-promotion")));
  if (sub && sub->type == REDIS_REPLY_ERROR) {
    // An ACL user granted only the +switch-master channel: follow switches without the
    // early move at the promotion.
    sub.reset(static_cast<redisReply*>(redisCommand(ctx, "SUBSCRIBE +switch-master")));
  }
  if (!sub || sub->type != REDIS_REPLY_ARRAY) return;
  subscribed_.store(true, std::memory_order_release);
  // Re-resolving covers a switch announced while we were not listening.
  on_change_(std::nullopt);

  // A sentinel that stops answering (paused, cut off) is detected by PINGs: any bytes
  // count as a sign of life; none for 3 intervals and we move to the next sentinel.
  constexpr Micros kPing = 1'000'000;
  auto last_heard = SteadyClock::now();
  auto next_ping = last_heard + std::chrono::microseconds(kPing);
  while (!stop_.load(std::memory_order_acquire)) {
    const auto now = SteadyClock::now();
    if (now - last_heard > std::chrono::microseconds(3 * kPing)) return;
    if (now >= next_ping) {
      redisAppendCommand(ctx, "PING");
      int done = 0;
      while (!done) {
        if (redisBufferWrite(ctx, &done) != REDIS_OK) return;
      }
      next_ping = now + std::chrono::microseconds(kPing);
    }
    pollfd p[2] = {{ctx->fd, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int wait_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next_ping - now).count() + 1);
    if (poll(p, 2, wait_ms) < 0 && errno != EINTR) return;
    if (p[1].revents != 0) return;  // stopping
    if (p[0].revents == 0) continue;
    if (redisBufferRead(ctx) != REDIS_OK) return;  // closed or failed
    last_heard = SteadyClock::now();
    for (;;) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(ctx, &raw) != REDIS_OK) return;
      if (raw == nullptr) break;
      ReplyOwner r(static_cast<redisReply*>(raw));
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) continue;
      if (ReplyText(r->element[0]) != "message") continue;
      const std::string channel = ReplyText(r->element[1]);
      auto sw = channel == "+switch-master" ? ParseSwitchMaster(ReplyText(r->element[2]))
                                            : ParsePromotion(ReplyText(r->element[2]));
      if (sw && sw->first == options_.master_name) on_change_(sw->second);
    }
  }
}

}  // namespace sluice::redis
