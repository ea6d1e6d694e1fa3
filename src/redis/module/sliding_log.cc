// The module's sliding window log (sliding_log.h). Each step names the Lua it mirrors
// (lua/sliding_window_log.lua unless said otherwise).
#include "redis/module/sliding_log.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "redis/module/state.h"

namespace sluice::redis_module {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the inline form is little-endian doubles, read and written in place");

constexpr std::size_t kHead = 25;   // '<Bddd': 1, expires, last_seen, used
constexpr std::size_t kEntry = 16;  // '<dd': cost, time
static_assert(kHead + kEntry * kLogInline <= sizeof(StateBytes::data));

// log_entries.lua's entry_cost: the digits after the member's last ':'.
bool EntryCost(std::string_view m, std::uint64_t* cost) {
  const std::size_t colon = m.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == m.size()) return false;
  const char* end = m.data() + m.size();
  const auto r = std::from_chars(m.data() + colon + 1, end, *cost);
  return r.ec == std::errc() && r.ptr == end && *cost <= (1ULL << 53);
}

// log_entries.lua's entry_cum: the running sum of a member of the current layout (a
// big-endian double, then ':'); false for an older member ("<count>:<cost>").
bool EntryCum(std::string_view m, double* cum) {
  if (m.size() < 9 || static_cast<unsigned char>(m[0]) < 63 || m[8] != ':') return false;
  std::uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<unsigned char>(m[i]);
  *cum = std::bit_cast<double>(bits);
  return true;
}

// log_entries.lua's member: struct.pack('>d', cum) .. ':' .. int(cost), into `out`.
std::string_view Member(double cum, std::uint64_t cost, char (&out)[32]) {
  const auto bits = std::bit_cast<std::uint64_t>(cum);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(bits >> (56 - 8 * i));
  out[8] = ':';
  const char* end = std::to_chars(out + 9, out + sizeof(out), cost).ptr;
  return {out, static_cast<std::size_t>(end - out)};
}

// The inline form's entries as core's SlidingLog (core/algorithms.h), on the state.
class InlineLog final : public core::SlidingLog {
 public:
  explicit InlineLog(SlidingLogState& s) : s_(s) {}
  Micros last_seen() const override { return s_.last; }
  void set_last_seen(Micros t) override { s_.last = t; }
  std::size_t size() const override { return s_.count; }
  const core::LogEntry& at(std::size_t i) const override { return s_.entries[i]; }
  void pop_front() override {
    s_.used -= s_.entries[0].cost;
    std::copy(s_.entries + 1, s_.entries + s_.count, s_.entries);
    --s_.count;
  }
  void pop_back() override { s_.used -= s_.entries[--s_.count].cost; }
  // (a commit appends one entry to at most kLogInline: spilled at once)
  void push_back(core::LogEntry e) override {
    if (s_.count == kLogInline + 1) return;
    s_.entries[s_.count++] = e;
    s_.used += e.cost;
  }
  std::uint64_t used() const override { return s_.used; }

 private:
  SlidingLogState& s_;
};

// log_state: the inline form (its entries' costs must add up to `used`), the text
// form, or no log (fresh).
SlidingLogState ReadLog(const StoredValue& v) {
  SlidingLogState st;
  const std::string_view raw = v.bytes;
  if (!v.present) return st;
  if (raw.size() >= kHead && raw[0] == 1 && (raw.size() - kHead) % kEntry == 0) {
    const std::size_t n = (raw.size() - kHead) / kEntry;
    double h[3];
    std::memcpy(h, raw.data() + 1, sizeof(h));
    if (n > kLogInline || !WholeNumber(h[0]) || !WholeNumber(h[1]) || !WholeNumber(h[2]) ||
        h[2] < 0)
      return st;
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double e[2];
      std::memcpy(e, raw.data() + kHead + kEntry * i, sizeof(e));
      if (!WholeNumber(e[0]) || e[0] < 1 || !WholeNumber(e[1])) return SlidingLogState{};
      st.entries[i] = {static_cast<Micros>(e[1]), static_cast<std::uint64_t>(e[0])};
      sum += e[0];
    }
    if (sum != h[2]) return SlidingLogState{};
    st.fresh = false;
    st.inline_form = true;
    st.count = n;
    st.expires = static_cast<Micros>(h[0]);
    st.last = static_cast<Micros>(h[1]);
    st.used = static_cast<std::uint64_t>(h[2]);
    return st;
  }
  // '^(%d) (%S+) (%S+) (%S+) (%S+)$' with '1' first, each field's tonumber
  if (raw.size() < 2 || raw[0] != '1' || raw[1] != ' ') return st;
  double f[4];
  std::string_view rest = raw.substr(2);
  for (int i = 0; i < 4; ++i) {
    const std::size_t sp = i < 3 ? rest.find(' ') : rest.size();
    if (sp == std::string_view::npos || sp == 0) return st;
    const std::string_view field = rest.substr(0, sp);
    for (char ch : field) {
      if (ch == ' ' || (ch >= '\t' && ch <= '\r')) return st;  // (%S: not Lua's space)
    }
    if (!LuaNumber(field, &f[i]) || !WholeNumber(f[i])) return st;
    rest.remove_prefix(i < 3 ? sp + 1 : sp);
  }
  if (f[2] < 0 || f[3] < 0) return st;
  st.fresh = false;
  st.expires = static_cast<Micros>(f[0]);
  st.last = static_cast<Micros>(f[1]);
  st.used = static_cast<std::uint64_t>(f[2]);
  st.seq = static_cast<std::uint64_t>(f[3]);
  return st;
}

// One check's log operations, as the script's functions of the same names.
class Log {
 public:
  explicit Log(const LogCheck& lc) : lc_(lc), p_(lc.policy), st_(lc.state), w_(lc.policy.window) {}

  Micros Raise();
  Decision Decide(std::uint64_t cost);
  void Commit(std::uint64_t cost);
  void Refund(std::uint64_t cost);
  std::uint64_t Force(std::uint64_t cost, std::uint64_t bound);
  Decision ForceThenPeek(std::uint64_t bound);
  void Flush();

 private:
  bool Call(const char* command, std::initializer_list<std::string_view> args, bool write = false) {
    return CallArgs(command, {args.begin(), args.size()}, write);
  }
  bool CallArgs(const char* command, std::span<const std::string_view> args, bool write) {
    return lc_.logs.Run(command, static_cast<std::uint32_t>(lc_.check.log_key), args, write,
                        &reply_);
  }
  // A failed call: a log that is not what sluice writes.
  void Damaged(std::string_view what) {
    lc_.logs.Fail("the sliding log's sorted set has " + std::string(what) +
                  " (not a log sluice writes)");
  }
  // The score of a ZRANGE ... WITHSCORES reply's entry `i` (tonumber).
  bool Score(std::size_t i, Micros* ts) {
    if (ReplyScore(reply_, i, ts)) return true;
    Damaged("an entry missing or without a score");
    return false;
  }
  Decision Inline(std::uint64_t cost);
  bool TimeFreeing(std::uint64_t excess, Micros* ts);
  bool BinarySearch(std::uint64_t excess, double base, Micros* ts);
  void Spill();
  void Write(long long ttl_ms, bool keep_ttl);
  long long Ttl(Micros expires) const { return TtlMs(expires, lc_.now, lc_.pad_ms); }

  const LogCheck& lc_;
  const Policy& p_;
  SlidingLogState& st_;
  const Micros w_;
  // (one per thread, kept: a sorted set's reply allocates only when it grows)
  static thread_local SetReply reply_;
};

thread_local SetReply Log::reply_;

// core's decision (core/sliding_window_log.cc) on the inline entries, its raise first:
// what it dropped or advanced leaves the state to flush.
Decision Log::Inline(std::uint64_t cost) {
  const std::size_t n = st_.count;
  const Micros last = st_.last;
  InlineLog log(st_);
  Micros e = 0;
  const Decision d = core::SlidingWindowLog(p_, log, lc_.now, cost, /*commit=*/false, &e);
  if (st_.count != n || st_.last != last) st_.dirty = true;
  return d;
}

// raise: t = max(now, last_seen); what left the window (ts <= t - window) dropped, once
// per horizon (an inline log: by core's decision of cost 0).
Micros Log::Raise() {
  if (st_.inline_form) {
    (void)Inline(0);
    return st_.last;
  }
  if (st_.fresh) return lc_.now;
  const Micros t = std::max(lc_.now, st_.last);
  const Micros h = t - w_;
  if (!st_.trimmed || h > st_.trimmed_at) {
    st_.trimmed = true;
    st_.trimmed_at = h;
    const Digits horizon(h);
    if (!Call("ZRANGEBYSCORE", {"-inf", horizon.view()})) return t;
    if (!reply_.items.empty()) {
      for (const std::string& m : reply_.items) {
        std::uint64_t cost = 0;
        if (!EntryCost(m, &cost) || cost > st_.used) {
          Damaged("more than its state counts");
          return t;
        }
        st_.used -= cost;
      }
      Call("ZREMRANGEBYSCORE", {"-inf", horizon.view()}, /*write=*/true);
      st_.dirty = true;
    }
  }
  if (st_.last != t) st_.dirty = true;
  st_.last = t;
  return t;
}

// DECIDE[1]: the inline form by core's algorithm; otherwise (a fresh log too, whose
// denial searches what the set holds, as the script's) the same rules on the set.
Decision Log::Decide(std::uint64_t cost) {
  if (st_.inline_form) return Inline(cost);
  const Micros t = Raise();
  Decision d;
  d.limit = p_.limit;
  const std::uint64_t need = std::max<std::uint64_t>(cost, 1);
  std::uint64_t used = st_.used;
  d.allowed = used + need <= p_.limit;
  Micros ts = 0;
  if (!d.allowed && TimeFreeing(used + need - p_.limit, &ts)) d.retry_after = ts + w_ - t;
  if (d.allowed && cost > 0) {
    used += cost;
    d.reset_after = w_;
  } else if (used > 0) {
    if (Call("ZRANGE", {"-1", "-1", "WITHSCORES"}) && Score(1, &ts)) d.reset_after = ts + w_ - t;
  }
  // (a penalty may leave more than the limit)
  d.remaining = used < p_.limit ? p_.limit - used : 0;
  return d;
}

// log_entries.lua's time_freeing: the time of the oldest entry at which the entries up
// to it sum to `excess` or more; false when none does.
bool Log::TimeFreeing(std::uint64_t excess, Micros* ts) {
  if (!Call("ZRANGE", {"0", "0"}) || reply_.items.empty()) return false;
  const std::string first = reply_.items[0];
  if (!Call("ZRANGE", {"-1", "-1"}) || reply_.items.empty()) return false;
  double c0 = 0, cl = 0;
  if (EntryCum(first, &c0) && EntryCum(reply_.items[0], &cl)) {
    std::uint64_t cost = 0;
    if (!EntryCost(first, &cost)) {
      Damaged("an entry without a cost");
      return false;
    }
    const double base = c0 - static_cast<double>(cost);
    if (cl - base < static_cast<double>(excess)) return false;
    return BinarySearch(excess, base, ts);
  }
  // an older layout: walk from the oldest entry
  std::uint64_t freed = 0;
  for (long long offset = 0;; offset += 64) {
    const Digits from(offset), to(offset + 63);
    if (!Call("ZRANGE", {from.view(), to.view(), "WITHSCORES"}) || reply_.items.empty()) {
      return false;
    }
    for (std::size_t j = 0; j + 1 < reply_.items.size(); j += 2) {
      std::uint64_t cost = 0;
      if (!EntryCost(reply_.items[j], &cost)) {
        Damaged("an entry without a cost");
        return false;
      }
      freed += cost;
      if (freed >= excess) return Score(j + 1, ts);
    }
  }
}

// The smallest rank whose running sum less `base` reaches `excess`: O(log n) ZRANGEs of
// one entry each (issue #11).
bool Log::BinarySearch(std::uint64_t excess, double base, Micros* ts) {
  if (!Call("ZCARD", {})) return false;
  long long lo = 0, hi = reply_.integer - 1;
  while (lo < hi) {
    const long long mid = (lo + hi) / 2;
    const Digits at(mid);
    double cum = 0;
    if (!Call("ZRANGE", {at.view(), at.view()})) return false;
    if (reply_.items.empty() || !EntryCum(reply_.items[0], &cum)) {
      Damaged("entries of two layouts");
      return false;
    }
    if (cum - base >= static_cast<double>(excess)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const Digits at(lo);
  return Call("ZRANGE", {at.view(), at.view(), "WITHSCORES"}) && Score(1, ts);
}

// spill: an inline log's entries into a fresh sorted set (cleared of leftovers of an
// earlier log), the running sums starting from its oldest entry; the state is then the
// text form.
void Log::Spill() {
  Call("DEL", {}, /*write=*/true);
  char members[kLogInline + 1][32];
  Digits times[kLogInline + 1];
  std::string_view args[2 * (kLogInline + 1)];
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < st_.count; ++i) {
    sum += st_.entries[i].cost;
    times[i].Set(st_.entries[i].ts);
    args[2 * i] = times[i].view();
    args[2 * i + 1] = Member(static_cast<double>(sum), st_.entries[i].cost, members[i]);
  }
  if (sum > 0) {
    CallArgs("ZADD", {args, 2 * st_.count}, /*write=*/true);
    const Digits ttl(Ttl(st_.expires));
    Call("PEXPIRE", {ttl.view()}, /*write=*/true);
  }
  st_.inline_form = false;
  st_.count = 0;
  st_.seq = sum;
  st_.dirty = true;
}

// COMMIT[1]: the entry logged; a new log, or one left empty, is the inline form.
void Log::Commit(std::uint64_t cost) {
  const Micros t = Raise();
  if (st_.fresh || (st_.used == 0 && !st_.inline_form)) {
    st_.fresh = false;
    st_.inline_form = true;
    st_.count = 0;
    st_.last = t;
  }
  st_.expires = t + w_;
  const long long ttl = Ttl(st_.expires);
  if (st_.inline_form) {
    InlineLog log(st_);
    Micros e = 0;
    core::SlidingWindowLogCommit(p_, log, lc_.now, cost, &e);
    // an entry more than kLogInline: all of them into the sorted set, one ZADD
    if (st_.count > kLogInline) Spill();
  } else {
    // (used > 0 here: an empty log went inline above, so its running sum goes on)
    st_.seq += cost;
    st_.used += cost;
    char member[32];
    const Digits at(t), ms(ttl);
    Call("ZADD", {at.view(), Member(static_cast<double>(st_.seq), cost, member)},
         /*write=*/true);
    Call("PEXPIRE", {ms.view()}, /*write=*/true);
  }
  Write(ttl, /*keep_ttl=*/false);
  st_.dirty = false;
}

// REFUND[1]: what left the window dropped, the inline form spilled, then up to `cost`
// units removed from the newest entries (the newest one left may keep part of its own).
void Log::Refund(std::uint64_t cost) {
  if (st_.fresh) return;
  const Micros t = Raise();
  if (st_.inline_form) Spill();
  bool any = false;
  while (Call("ZRANGE", {"-1", "-1", "WITHSCORES"})) {
    any = reply_.items.size() >= 2;
    if (cost == 0 || !any) break;
    const std::string newest = reply_.items[0], score = reply_.items[1];
    std::uint64_t ec = 0;
    if (!EntryCost(newest, &ec) || ec > st_.used) return Damaged("more than its state counts");
    Call("ZREM", {newest}, /*write=*/true);
    if (ec > cost) {
      // the rest of the entry kept; its running sum goes down by what was removed
      char buf[32];
      double cum = 0;
      std::string kept;
      if (EntryCum(newest, &cum)) {
        kept = Member(cum - static_cast<double>(cost), ec - cost, buf);
      } else {
        const std::size_t digits = newest.find_first_not_of("0123456789");
        if (digits == 0 || digits == std::string::npos || newest[digits] != ':') {
          return Damaged("an entry of no layout");
        }
        kept =
            newest.substr(0, digits + 1).append(Digits(static_cast<long long>(ec - cost)).view());
      }
      Call("ZADD", {score, kept}, /*write=*/true);
      st_.used -= cost;
      cost = 0;
    } else {
      st_.used -= ec;
      cost -= ec;
    }
  }
  Micros ts = t;
  if (any && Score(1, &ts)) {
    ts += w_;
    // the next entry continues the running sum from the newest one left
    double cum = 0;
    if (EntryCum(reply_.items[0], &cum)) {
      if (!WholeNumber(cum) || cum < 0) return Damaged("a running sum out of range");
      st_.seq = static_cast<std::uint64_t>(cum);
    }
  }
  st_.expires = ts;
  const long long ttl = Ttl(st_.expires);
  const Digits ms(ttl);
  Call("PEXPIRE", {ms.view()}, /*write=*/true);
  Write(ttl, /*keep_ttl=*/false);
  st_.dirty = false;
}

// FORCE[1]: the log normalised as a decision would, then up to `bound` units in all
// taken, as a commit of that many; returns how many.
std::uint64_t Log::Force(std::uint64_t cost, std::uint64_t bound) {
  Raise();
  const std::uint64_t add = st_.used >= bound ? 0 : std::min(cost, bound - st_.used);
  if (add > 0) Commit(add);
  return add;
}

// The runner's forced check (a penalty) and its `charge` (an overage): the check's cost
// taken by force up to `bound`, then a peek at the state after it, whose normalising is
// kept; `charged` says how many units were taken.
Decision Log::ForceThenPeek(std::uint64_t bound) {
  const std::uint64_t add = Force(lc_.check.cost, bound);
  Decision d = Decide(0);
  d.charged = add;
  Flush();
  return d;
}

// flush_logs: what a decision normalised, kept for a log it did not commit to, with the
// state key's TTL as it is (SET ... KEEPTTL).
void Log::Flush() {
  if (st_.dirty && !st_.fresh) Write(Ttl(st_.expires), /*keep_ttl=*/true);
  st_.dirty = false;
}

// log_value: the state key's bytes, written with `ttl_ms` or the key's own TTL.
void Log::Write(long long ttl_ms, bool keep_ttl) {
  ModuleWrite w;
  w.check = lc_.index;
  w.ttl_ms = ttl_ms;
  w.keep_ttl = keep_ttl;
  char* out = w.value.data;
  std::size_t size = 0;
  if (st_.inline_form) {
    out[0] = 1;
    const double head[3] = {static_cast<double>(st_.expires), static_cast<double>(st_.last),
                            static_cast<double>(st_.used)};
    std::memcpy(out + 1, head, sizeof(head));
    size = kHead;
    for (std::size_t i = 0; i < st_.count && i < kLogInline; ++i, size += kEntry) {
      const double e[2] = {static_cast<double>(st_.entries[i].cost),
                           static_cast<double>(st_.entries[i].ts)};
      std::memcpy(out + size, e, sizeof(e));
    }
  } else {
    const long long f[4] = {st_.expires, st_.last, static_cast<long long>(st_.used),
                            static_cast<long long>(st_.seq)};
    out[size++] = '1';
    for (long long v : f) {
      out[size++] = ' ';
      size = static_cast<std::size_t>(std::to_chars(out + size, out + 96, v).ptr - out);
    }
  }
  w.value.size = static_cast<std::uint8_t>(size);
  lc_.writes->push_back(w);
}

}  // namespace

bool SlidingLogFirst(const LogCheck& lc, const StoredValue& value, Decision* d) {
  lc.state = ReadLog(value);
  Log log(lc);
  switch (lc.check.op) {
    case 2:
      log.Refund(lc.check.cost);
      return false;
    case 3:
      *d = log.ForceThenPeek(core::PenaltyBound(lc.policy));
      return true;
    default:
      *d = log.Decide(lc.check.cost);
      return true;
  }
}

Decision SlidingLogCharge(const LogCheck& lc) {
  Log log(lc);
  return log.ForceThenPeek(core::OverageBound(lc.policy));
}

void SlidingLogLast(const LogCheck& lc, bool commit) {
  Log log(lc);
  if (commit && lc.check.cost > 0) {
    log.Commit(lc.check.cost);
  } else {
    log.Flush();
  }
}

}  // namespace sluice::redis_module
