// The sorted sets of a module call in Redis (redis_sets.h).
#include "redis/module/redis_sets.h"

#include <charconv>
#include <cmath>
#include <iterator>

#include "redis/module/request.h"
#include "redis/module/sliding_log.h"

namespace sluice::redis_module {
namespace {

constexpr const char* kWrongTypeReply =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

// A sorted set's key, opened for one command and closed after it (a key of a call's
// sorted sets is never held open across commands: sluice_module.cc).
class SetKey {
 public:
  SetKey(RedisModuleCtx* ctx, RedisModuleString* name, bool write)
      : key_(api.OpenKey(ctx, name, write ? kRead | kWrite : kRead)) {
    type_ = key_ != nullptr ? api.KeyType(key_) : kKeyTypeEmpty;
  }
  ~SetKey() {
    if (key_ != nullptr) api.CloseKey(key_);
  }
  SetKey(const SetKey&) = delete;
  SetKey& operator=(const SetKey&) = delete;
  bool empty() const { return type_ == kKeyTypeEmpty; }
  bool wrong_type() const { return type_ != kKeyTypeEmpty && type_ != kKeyTypeZset; }
  RedisModuleKey* get() const { return key_; }
  // The first (or last) member and its score; false when the set is empty.
  bool End(bool last, std::string* member, double* score) const {
    if (empty()) return false;
    const double inf = INFINITY;
    const int ok = last ? api.ZsetLastInScoreRange(key_, -inf, inf, 0, 0)
                        : api.ZsetFirstInScoreRange(key_, -inf, inf, 0, 0);
    if (ok != kOk) return false;
    RedisModuleString* e =
        api.ZsetRangeEndReached(key_) ? nullptr : api.ZsetRangeCurrentElement(key_, score);
    api.ZsetRangeStop(key_);
    if (e == nullptr) return false;
    std::size_t len = 0;
    const char* p = api.StringPtrLen(e, &len);
    member->assign(p, len);
    api.FreeString(nullptr, e);
    return true;
  }

 private:
  RedisModuleKey* key_;
  int type_;
};

// A member as a RedisModuleString for the sorted-set functions, freed after.
class Member {
 public:
  Member(RedisModuleCtx* ctx, std::string_view m)
      : ctx_(ctx), s_(api.CreateString(ctx, m.data(), m.size())) {}
  ~Member() { api.FreeString(ctx_, s_); }
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;
  RedisModuleString* get() const { return s_; }

 private:
  RedisModuleCtx* ctx_;
  RedisModuleString* s_;
};

// A score as Redis's ZRANGE ... WITHSCORES gives it: the digits that read back as the
// same double (sorted_sets.h's ReplyScore reads it).
std::string ScoreText(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

}  // namespace

bool RedisSets::Run(const char* command, std::uint32_t key, std::span<const std::string_view> args,
                    bool write, SetReply* out) {
  out->integer = 0;
  out->items.clear();
  if (!error_.empty()) return false;
  if (Native(command, key, args, out)) return error_.empty();
  return Call(command, key, args, write, out);
}

bool RedisSets::Native(const char* command, std::uint32_t key,
                       std::span<const std::string_view> args, SetReply* out) {
  const std::string_view cmd(command);
  RedisModuleString* name = names_[key];
  const auto wrong_type = [&] {
    Fail(std::string(command) + " failed: " + kWrongTypeReply);
    return true;
  };
  long long v = 0;
  if (cmd == "ZCARD" && args.empty()) {
    SetKey k(ctx_, name, false);
    if (k.wrong_type()) return wrong_type();
    out->integer = k.empty() ? 0 : static_cast<long long>(api.ValueLength(k.get()));
    return true;
  }
  if (cmd == "ZRANGE" && (args.size() == 2 || (args.size() == 3 && args[2] == "WITHSCORES")) &&
      args[0] == args[1] && (args[0] == "0" || args[0] == "-1")) {
    // the first or the last member (other ranks: RedisModule_Call, which finds a rank in
    // O(log n) where the sorted-set API would walk to it)
    SetKey k(ctx_, name, false);
    if (k.wrong_type()) return wrong_type();
    std::string member;
    double score = 0;
    if (k.End(args[0] == "-1", &member, &score)) {
      out->items.push_back(std::move(member));
      if (args.size() == 3) out->items.push_back(ScoreText(score));
    }
    return true;
  }
  if (cmd == "ZREMRANGEBYSCORE" && args.size() == 2 && args[0] == "-inf" && ParseInt(args[1], &v)) {
    // the members up to v, first to last (each removal re-reads the first: the key goes
    // once the set is empty)
    SetKey k(ctx_, name, true);
    if (k.wrong_type()) return wrong_type();
    std::string member;
    double score = 0;
    while (k.End(false, &member, &score) && score <= static_cast<double>(v)) {
      const Member m(ctx_, member);
      int deleted = 0;
      if (api.ZsetRem(k.get(), m.get(), &deleted) != kOk || deleted == 0) break;
      ++out->integer;
    }
    if (out->integer > 0)
      api.Replicate(ctx_, "ZREMRANGEBYSCORE", "scb", name, "-inf", args[1].data(), args[1].size());
    return true;
  }
  if (cmd == "ZREM" && args.size() == 1) {
    SetKey k(ctx_, name, true);
    if (k.wrong_type()) return wrong_type();
    if (k.empty()) return true;
    const Member m(ctx_, args[0]);
    int deleted = 0;
    if (api.ZsetRem(k.get(), m.get(), &deleted) == kOk && deleted != 0) {
      out->integer = 1;
      api.Replicate(ctx_, "ZREM", "sb", name, args[0].data(), args[0].size());
    }
    return true;
  }
  if (cmd == "ZADD" && args.size() == 4 && args[0] == "XX" && args[1] == "INCR" && args[2] == "0") {
    // a permit's extend asks whether it is held: its score, or nothing (no change, so
    // nothing to replicate)
    SetKey k(ctx_, name, false);
    if (k.wrong_type()) return wrong_type();
    double score = 0;
    const Member m(ctx_, args[3]);
    if (!k.empty() && api.ZsetScore(k.get(), m.get(), &score) == kOk) {
      out->items.push_back(ScoreText(score));
    }
    return true;
  }
  const bool xx = cmd == "ZADD" && args.size() == 3 && args[0] == "XX";
  if (cmd == "ZADD" && (xx || args.size() == 2) && ParseInt(args[xx ? 1 : 0], &v)) {
    // one member at an integer score (a permit's expiry, a log entry's time)
    SetKey k(ctx_, name, true);
    if (k.wrong_type()) return wrong_type();
    if (xx && k.empty()) return true;
    const std::string_view score = args[xx ? 1 : 0], member = args[xx ? 2 : 1];
    const Member m(ctx_, member);
    int flags = xx ? kZaddXx : 0;
    if (api.ZsetAdd(k.get(), static_cast<double>(v), m.get(), &flags) != kOk) return wrong_type();
    out->integer = (flags & kZaddAdded) != 0 ? 1 : 0;
    if ((flags & (kZaddAdded | kZaddUpdated)) != 0) {
      if (xx) {
        api.Replicate(ctx_, "ZADD", "scbb", name, "XX", score.data(), score.size(), member.data(),
                      member.size());
      } else {
        api.Replicate(ctx_, "ZADD", "sbb", name, score.data(), score.size(), member.data(),
                      member.size());
      }
    }
    return true;
  }
  if (cmd == "PEXPIRE" && args.size() == 1 && ParseInt(args[0], &v) && v > 0) {
    // as Redis replicates a PEXPIRE: PEXPIREAT of its expiry
    SetKey k(ctx_, name, true);
    if (k.empty()) return true;
    const long long at = now_ms_ + v;
    if (api.SetAbsExpire(k.get(), at) != kOk) return true;
    out->integer = 1;
    api.Replicate(ctx_, "PEXPIREAT", "sl", name, at);
    return true;
  }
  return false;
}

bool RedisSets::Call(const char* command, std::uint32_t key, std::span<const std::string_view> args,
                     bool write, SetReply* out) {
  // (at most a spill's ZADD: the key, then a score and a member per entry)
  RedisModuleString* argv[2 * (kLogInline + 1) + 1];
  if (args.size() + 1 > std::size(argv)) {
    Fail(std::string(command) + " with too many arguments");
    return false;
  }
  argv[0] = names_[key];
  for (std::size_t i = 0; i < args.size(); ++i) {
    argv[i + 1] = api.CreateString(ctx_, args[i].data(), args[i].size());
  }
  RedisModuleCallReply* r = api.Call(ctx_, command, write ? "!v" : "v", argv, args.size() + 1);
  for (std::size_t i = 0; i < args.size(); ++i) api.FreeString(ctx_, argv[i + 1]);
  const int type = r != nullptr ? api.CallReplyType(r) : -1;
  if (type == kReplyInteger) {
    out->integer = api.CallReplyInteger(r);
  } else if (type == kReplyArray) {
    const std::size_t n = api.CallReplyLength(r);
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t len = 0;
      const char* p = api.CallReplyStringPtr(api.CallReplyArrayElement(r, i), &len);
      out->items.emplace_back(p != nullptr ? p : "", p != nullptr ? len : 0);
    }
  } else if (type == kReplyString) {  // (ZADD ... INCR: the score)
    std::size_t len = 0;
    const char* p = api.CallReplyStringPtr(r, &len);
    out->items.emplace_back(p != nullptr ? p : "", p != nullptr ? len : 0);
  } else if (type != kReplyNull) {
    // (WRONGTYPE: a ":log" key that holds no sorted set, as a script's call fails)
    std::size_t len = 0;
    const char* p = r != nullptr ? api.CallReplyStringPtr(r, &len) : nullptr;
    Fail(std::string(command) +
         " failed: " + (p != nullptr ? std::string(p, len) : std::string("no reply")));
  }
  if (r != nullptr) api.FreeCallReply(r);
  return error_.empty();
}

}  // namespace sluice::redis_module
