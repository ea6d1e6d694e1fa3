// Sliding window log: exact. Every accepted request is logged with its time and
// cost; a request at time t sees the entries with t - ts < W.
//
//   t = max(now, last_seen); drop entries with ts <= t - W
//   allowed <=> used + max(cost, 1) <= limit
// A denied request is not logged (the article's warning: logging it would skew
// every later decision).
#include <algorithm>

#include "core/algorithms.h"

namespace sluice::core {
namespace {

Micros Raise(SlidingLog& log, Micros now, const Policy& p) {
  const Micros t = std::max(now, log.last_seen());
  log.set_last_seen(t);
  while (log.size() > 0 && log.at(0).ts <= t - p.window) log.pop_front();
  return t;
}

}  // namespace

Decision SlidingWindowLog(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                          bool commit, Micros* expires) {
  const Micros t = Raise(log, now, p);
  const std::uint64_t need = std::max<std::uint64_t>(cost, 1);
  Decision d;
  d.limit = p.limit;
  std::uint64_t used = log.used();
  d.allowed = used + need <= p.limit;
  if (!d.allowed) {
    // The oldest entries leave first: find the one whose expiry frees enough room.
    const std::uint64_t excess = used + need - p.limit;
    std::uint64_t freed = 0;
    for (std::size_t i = 0; i < log.size(); ++i) {
      freed += log.at(i).cost;
      if (freed >= excess) {
        d.retry_after = log.at(i).ts + p.window - t;
        break;
      }
    }
  }
  // The decision describes the state after this request, whether or not the caller
  // commits it now (multi-limit batches commit only once every check has allowed).
  if (d.allowed && cost > 0) {
    if (commit) log.push_back({t, cost});
    used += cost;
    d.reset_after = p.window;
  } else {
    d.reset_after = used > 0 ? log.at(log.size() - 1).ts + p.window - t : 0;
  }
  // (used may exceed the limit after a penalty or a limit decrease)
  d.remaining = used < p.limit ? p.limit - used : 0;
  *expires = t + d.reset_after;
  return d;
}

void SlidingWindowLogCommit(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                            Micros* expires) {
  const Micros t = Raise(log, now, p);
  if (cost > 0) log.push_back({t, cost});
  *expires = log.size() > 0 ? log.at(log.size() - 1).ts + p.window : t;
}

void SlidingWindowLogRefund(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                            Micros* expires) {
  const Micros t = Raise(log, now, p);
  while (cost > 0 && log.size() > 0) {
    const LogEntry newest = log.at(log.size() - 1);
    log.pop_back();
    if (newest.cost > cost) {
      log.push_back({newest.ts, newest.cost - cost});
      break;
    }
    cost -= newest.cost;
  }
  *expires = log.size() > 0 ? log.at(log.size() - 1).ts + p.window : t;
}

// Penalties (core/penalties.cc has the shared rules).
Decision SlidingWindowLogCharge(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                                std::uint64_t bound, Micros* expires) {
  Micros e;
  (void)SlidingWindowLog(p, log, now, 0, /*commit=*/false, &e);  // drops what left the window
  const std::uint64_t used = log.used();
  const std::uint64_t room = bound > used ? bound - used : 0;
  const std::uint64_t add = std::min(cost, room);
  if (add > 0) SlidingWindowLogCommit(p, log, now, add, &e);
  Decision d = SlidingWindowLog(p, log, now, 0, /*commit=*/false, expires);
  d.charged = add;
  return d;
}

Decision SlidingWindowLogPenalize(const Policy& p, SlidingLog& log, Micros now, std::uint64_t cost,
                                  Micros* expires) {
  return SlidingWindowLogCharge(p, log, now, cost, PenaltyBound(p), expires);
}

}  // namespace sluice::core
