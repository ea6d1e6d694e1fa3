#include "redis/sentinel.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>

#include "redis/client_thread.h"
#include "redis/handshake.h"
#include "redis/reply.h"
#include "redis/resp.h"

namespace sluice::redis {
namespace {

std::string ReplyText(const redisReply* r) {
  return r->str != nullptr ? std::string(r->str, r->len) : std::string();
}

bool IsAuthError(std::string_view e) {
  return e.starts_with("NOAUTH") || e.starts_with("WRONGPASS") || e.starts_with("NOPERM") ||
         e.find("invalid password") != std::string_view::npos;
}

// A connection to one sentinel, authenticated with the sentinel credentials, by
// `deadline` (the data path's bounded handshake: TLS, AUTH, PING).
Result<std::unique_ptr<Transport>> Dial(const SentinelOptions& o, const HostPort& s,
                                        Deadline deadline) {
  const Micros left = MicrosUntil(deadline);
  if (left <= 0) return Status::DeadlineExceeded("no time left to ask it");
  HandshakeOptions h;
  h.url.host = s.host;
  h.url.port = s.port;
  h.url.endpoints = {s};
  h.url.user = o.user;
  h.url.password = o.password;
  h.url.tls = o.tls;
  h.connect_timeout = left;
  auto t = ConnectAndHandshake(h);
  if (!t.ok() && t.status().code() == ErrorCode::kInvalidArgument) {
    return Status::InvalidArgument(
        "refused the sentinel credentials "
        "(sentinel_user/sentinel_password): " +
        t.status().message());
  }
  return t;
}

}  // namespace

Result<HostPort> AskSentinels(const SentinelOptions& o, Micros budget) {
  const Deadline deadline = DeadlineAfter(budget);
  std::string notes;
  bool answered = false;  // some sentinel answered, but not with an address
  for (std::size_t i = 0; i < o.sentinels.size(); ++i) {
    const HostPort& s = o.sentinels[i];
    // An equal share of what is left for each sentinel not yet asked, so one that
    // does not answer cannot use up the time of the others.
    const Micros share = std::min(
        o.connect_timeout, MicrosUntil(deadline) / static_cast<Micros>(o.sentinels.size() - i));
    const Deadline until = DeadlineAfter(std::max<Micros>(share, 0));
    if (!notes.empty()) notes += "; ";
    notes += s.Describe() + ": ";
    auto t = Dial(o, s, until);
    if (!t.ok()) {
      if (t.status().code() == ErrorCode::kInvalidArgument) answered = true;
      notes += t.status().message();
      continue;
    }
    auto r = RoundTrip(**t, EncodeCommand({"SENTINEL", "get-master-addr-by-name", o.master_name}),
                       until, s.Describe(), "SENTINEL get-master-addr-by-name");
    if (!r.ok()) {
      notes += r.status().message();
      continue;
    }
    const redisReply* reply = r->get();
    answered = true;
    if (reply->type == REDIS_REPLY_NIL ||
        (reply->type == REDIS_REPLY_ARRAY && reply->elements == 0)) {
      notes += "does not know a master named '" + o.master_name + "'";
      continue;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string e = ReplyText(reply);
      notes += (IsAuthError(e) ? "refused (sentinel_user/sentinel_password?): " : "answered: ") + e;
      continue;
    }
    int port = 0;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        reply->element[1]->type == REDIS_REPLY_STRING) {
      const std::string p = ReplyText(reply->element[1]);
      auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
      if (ec == std::errc() && end == p.data() + p.size() && port > 0 && port < 65536) {
        return HostPort{ReplyText(reply->element[0]), port};
      }
    }
    notes += "answered something that is not an address";
  }
  if (o.sentinels.empty()) return Status::InvalidArgument("no sentinel to ask");
  const std::string what =
      "no sentinel gave the address of master '" + o.master_name + "' (" + notes + ")";
  return answered ? Status::InvalidArgument(what) : Status::Unavailable(what);
}

namespace {

// The space-separated words of a sentinel event's payload.
std::vector<std::string_view> SplitWords(std::string_view payload) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start < payload.size()) {
    std::size_t end = payload.find(' ', start);
    if (end == std::string_view::npos) end = payload.size();
    if (end > start) parts.push_back(payload.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace

std::optional<std::pair<std::string, HostPort>> ParseSwitchMaster(std::string_view payload) {
  const std::vector<std::string_view> parts = SplitWords(payload);
  if (parts.size() != 5) return std::nullopt;
  int port = 0;
  auto [end, ec] = std::from_chars(parts[4].data(), parts[4].data() + parts[4].size(), port);
  if (ec != std::errc() || end != parts[4].data() + parts[4].size() || port <= 0 || port > 65535) {
    return std::nullopt;
  }
  return std::make_pair(std::string(parts[0]), HostPort{std::string(parts[3]), port});
}

std::optional<std::pair<std::string, HostPort>> ParsePromotion(std::string_view payload) {
  const std::vector<std::string_view> parts = SplitWords(payload);
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
  thread_ = StartClientThread([this] { Run(); });
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
  const Deadline until = DeadlineAfter(options_.connect_timeout);
  auto dialed = Dial(options_, sentinel, until);
  if (!dialed.ok()) return;
  Transport& t = **dialed;
  const std::string where = sentinel.Describe();
  auto sub =
      RoundTrip(t, EncodeCommand({"SUBSCRIBE", "+switch-master", "+failover-state-wait-promotion"}),
                until, where, "SUBSCRIBE");
  if (sub.ok() && (*sub)->type == REDIS_REPLY_ERROR) {
    // An ACL user granted only the +switch-master channel: follow switches without the
    // early move at the promotion.
    sub = RoundTrip(t, EncodeCommand({"SUBSCRIBE", "+switch-master"}), until, where, "SUBSCRIBE");
  }
  if (!sub.ok() || (*sub)->type != REDIS_REPLY_ARRAY) return;
  subscribed_.store(true, std::memory_order_release);
  // Re-resolving covers a switch announced while we were not listening.
  on_change_(std::nullopt);

  ReaderPtr reader = NewReader();
  if (!reader) return;
  // A sentinel that stops answering (paused, cut off) is detected by PINGs: any bytes
  // count as a sign of life; none for 3 intervals and we move to the next sentinel.
  constexpr Micros kPing = 1'000'000;
  const std::string ping = EncodeCommand({"PING"});
  auto last_heard = SteadyClock::now();
  auto next_ping = last_heard + std::chrono::microseconds(kPing);
  std::string out;
  char buf[4096];
  while (!stop_.load(std::memory_order_acquire)) {
    const auto now = SteadyClock::now();
    if (now - last_heard > std::chrono::microseconds(3 * kPing)) return;
    if (now >= next_ping) {
      out += ping;
      next_ping = now + std::chrono::microseconds(kPing);
    }
    while (!out.empty()) {
      std::size_t wrote = 0;
      const IoResult w = t.Write(out.data(), out.size(), &wrote);
      if (w == IoResult::kOk) {
        out.erase(0, wrote);
      } else if (w == IoResult::kWouldBlock) {
        break;
      } else {
        return;
      }
    }
    if (!t.HasBuffered()) {
      pollfd p[2] = {{t.fd(), t.PollEvents(!out.empty()), 0}, {wake_[0], POLLIN, 0}};
      const int wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(next_ping - now).count() + 1);
      if (poll(p, 2, wait_ms) < 0 && errno != EINTR) return;
      if (p[1].revents != 0) return;  // stopping
      if (p[0].revents == 0) continue;
    }
    for (;;) {
      std::size_t got = 0;
      const IoResult r = t.Read(buf, sizeof(buf), &got);
      if (r == IoResult::kWouldBlock) break;
      if (r != IoResult::kOk) return;  // closed or failed
      redisReaderFeed(reader.get(), buf, got);
      last_heard = SteadyClock::now();
      if (got < sizeof(buf) && !t.HasBuffered()) break;
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK) return;
      if (raw == nullptr) break;
      ReplyPtr msg(static_cast<redisReply*>(raw));
      if (msg->type != REDIS_REPLY_ARRAY || msg->elements != 3) continue;
      if (ReplyText(msg->element[0]) != "message") continue;
      const std::string channel = ReplyText(msg->element[1]);
      auto sw = channel == "+switch-master" ? ParseSwitchMaster(ReplyText(msg->element[2]))
                                            : ParsePromotion(ReplyText(msg->element[2]));
      if (sw && sw->first == options_.master_name) on_change_(sw->second);
    }
  }
}

}  // namespace sluice::redis
