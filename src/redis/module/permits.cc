// The module's concurrency limits (permits.h), each step named after lua/concurrency.lua.
#include "redis/module/permits.h"

#include <algorithm>
#include <initializer_list>

#include "redis/module/state.h"

namespace sluice::redis_module {
namespace {

class Permits {
 public:
  explicit Permits(const PermitCheck& pc) : pc_(pc) {}

  // permits_trim: the permits held once the expired ones are dropped.
  std::uint64_t Trim() {
    const Digits now(pc_.now);
    Call("ZREMRANGEBYSCORE", {"-inf", now.view()}, /*write=*/true);
    if (!Call("ZCARD", {})) return 0;
    return reply_.integer > 0 ? static_cast<std::uint64_t>(reply_.integer) : 0;
  }

  // permits_reset: until the last held permit expires (0 when none is held).
  Micros Reset(std::uint64_t held) {
    Micros last = 0;
    if (held == 0 || !Call("ZRANGE", {"-1", "-1", "WITHSCORES"}) || !Score(1, &last)) return 0;
    return last - pc_.now;
  }

  // permits_expire: the set's TTL runs to its last expiry, `last` (the latest of the
  // permit just set and the set's own last one, which a decision has read already): what
  // the scripts' PEXPIRE ... GT leaves, never shortened, on any Redis version.
  void Expire(Micros last) {
    const Digits ms(TtlMs(last, pc_.now, pc_.pad_ms));
    Call("PEXPIRE", {ms.view()}, /*write=*/true);
  }

  // The score of the reply's entry `i` (ZRANGE ... WITHSCORES).
  bool Score(std::size_t i, Micros* at) {
    if (ReplyScore(reply_, i, at)) return true;
    pc_.sets.Fail("the permit set has an entry without a score (not a set sluice writes)");
    return false;
  }

  bool Call(const char* command, std::initializer_list<std::string_view> args, bool write = false) {
    return pc_.sets.Run(command, pc_.check.key, {args.begin(), args.size()}, write, &reply_);
  }
  const SetReply& reply() const { return reply_; }

 private:
  const PermitCheck& pc_;
  // (one per thread, kept: a reply allocates only when it grows)
  static thread_local SetReply reply_;
};

thread_local SetReply Permits::reply_;

std::uint64_t Free(std::uint64_t limit, std::uint64_t held) {
  return limit > held ? limit - held : 0;
}

}  // namespace

Decision PermitDecide(const PermitCheck& pc) {
  Permits set(pc);
  const std::uint64_t limit = pc.policy.limit;
  std::uint64_t held = set.Trim();
  Decision d;
  d.limit = limit;
  const std::string_view permit = pc.check.permit;
  if (pc.check.op == 5 || pc.check.op == 6) {
    bool found = false;
    if (pc.check.op == 5) {
      found = set.Call("ZREM", {permit}, /*write=*/true) && set.reply().integer == 1;
      if (found) --held;
    } else if (set.Call("ZADD", {"XX", "INCR", "0", permit}, /*write=*/true) &&
               !set.reply().items.empty()) {
      // (XX INCR 0: the score when held, nothing when not)
      found = true;
      const Digits at(pc.now + pc.policy.window);
      set.Call("ZADD", {"XX", at.view(), permit}, /*write=*/true);
    }
    d.allowed = found;
    d.remaining = Free(limit, held);
    d.reset_after = set.Reset(held);
    // (an extend: the set's TTL to the last expiry, the one the reply has just read)
    if (found && pc.check.op == 6) set.Expire(pc.now + d.reset_after);
    return d;
  }
  d.remaining = Free(limit, held);
  if (held + 1 > limit) {
    // the (held + 1 - limit)-th earliest expiry frees the first slot
    const Digits rank(static_cast<long long>(held - limit));
    Micros first = pc.now;
    if (set.Call("ZRANGE", {rank.view(), rank.view(), "WITHSCORES"})) set.Score(1, &first);
    d.reset_after = set.Reset(held);
    d.retry_after = first - pc.now;
    return d;
  }
  d.allowed = true;
  if (pc.check.cost == 0) {
    d.reset_after = set.Reset(held);
    return d;
  }
  // the state after this acquire, committed with the group: the last permit to expire
  // is this one, or one held under a longer lease (core/concurrency.cc)
  d.remaining = limit - held - 1;
  d.reset_after = pc.policy.window;
  if (held > 0) d.reset_after = std::max(d.reset_after, set.Reset(held));
  return d;
}

void PermitCommit(const PermitCheck& pc, const Decision& d) {
  Permits set(pc);
  const Digits at(pc.now + pc.policy.window);
  set.Call("ZADD", {at.view(), pc.check.permit}, /*write=*/true);
  set.Expire(pc.now + d.reset_after);
}

}  // namespace sluice::redis_module
