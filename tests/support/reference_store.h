// The store contract written as plainly as possible, on the pure algorithms of
// src/core: one entry per key, never dropped; an expired word state is "fresh", an
// expired log is all out of window; each call decides at exactly the `now` it is
// given. Tests compare real stores with it: MemoryStore (which additionally never lets
// its own time go back) with time moving forward, and the Redis scripts with time
// jumping back and forth (the Lua must mirror src/core operation for operation).
#pragma once

#include <deque>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/algorithm_ops.h"
#include "core/algorithms.h"
#include "sluice/store.h"

namespace sluice::testing {

// A deque-backed sliding log for the reference model.
class DequeLog final : public core::SlidingLog {
 public:
  Micros last_seen() const override { return last_seen_; }
  void set_last_seen(Micros t) override { last_seen_ = t; }
  std::size_t size() const override { return entries_.size(); }
  const core::LogEntry& at(std::size_t i) const override { return entries_[i]; }
  void pop_front() override {
    used_ -= entries_.front().cost;
    entries_.pop_front();
  }
  void pop_back() override {
    used_ -= entries_.back().cost;
    entries_.pop_back();
  }
  void push_back(core::LogEntry e) override {
    used_ += e.cost;
    entries_.push_back(e);
  }
  std::uint64_t used() const override { return used_; }

 private:
  Micros last_seen_ = std::numeric_limits<Micros>::min();
  std::deque<core::LogEntry> entries_;
  std::uint64_t used_ = 0;
};

// The store's contract, written as plainly as possible: one entry per key, never
// dropped (an expired word state is "fresh"; an expired log is all out of window).
//
// With `drop_expired` false it keeps every state and decides from it however old it is
// (fresh only when a key was never written): the store in which nothing ever expires.
// The algorithms promise that expiry changes no decision, so both modes, MemoryStore
// and the Redis scripts must all agree.
class ReferenceStore final : public Store {
 public:
  explicit ReferenceStore(bool drop_expired = true) : drop_expired_(drop_expired) {}

  // Decisions and refunds (the operations modelled here).
  Status Run(const StoreBatch& batch, std::span<Decision> out) override {
    if (Status s = ValidateBatch(batch); !s.ok()) return s;
    switch (batch.op) {
      case StoreOp::kDecide:
        return Decide(batch.checks, batch.now, out);
      case StoreOp::kRefund:
        return Refund(batch.checks, batch.now);
      default:
        return Status::Internal("the reference store does not model this operation");
    }
  }

  Status Reset(const Policy&, std::string_view key) override {
    entries_.erase(std::string(key));
    return Status::Ok();
  }

 private:
  Status Decide(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out) {
    struct Pending {
      core::WordState word;
      Micros expires = 0;
    };
    std::vector<Pending> next(checks.size());
    bool all_allowed = true, consumes = false;
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const StoreCheck& c = checks[i];
      const Policy& p = *c.policy;
      std::string key(c.key);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.algorithm != p.algorithm) {
        entries_.erase(it);
        it = entries_.end();
      }
      Entry* e = it == entries_.end() ? nullptr : &it->second;
      Pending& n = next[i];
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        DequeLog scratch;
        DequeLog& log = e ? e->log : scratch;
        out[i] = core::SlidingWindowLog(p, log, now, c.cost, false, &n.expires);
      } else {
        const bool fresh = e == nullptr || (drop_expired_ && e->expires <= now);
        Entry empty;
        const Entry& in = e ? *e : empty;
        // Every other algorithm is a word algorithm (concurrency is not modelled here:
        // differential_test.cc).
        out[i] = core::WordOpsOf(p.algorithm)
                     ->decide(p, in.word, fresh, now, c.cost, &n.word, &n.expires, c.max_wait);
      }
      all_allowed = all_allowed && out[i].allowed;
      consumes = consumes || c.cost > 0;
    }
    if (!all_allowed || !consumes) {
      // A token bucket with initial_tokens below its capacity starts at its first
      // request, allowed or not (src/core/token_bucket.cc).
      for (std::size_t i = 0; i < checks.size(); ++i) {
        const StoreCheck& c = checks[i];
        const Policy& p = *c.policy;
        if (p.algorithm != Algorithm::kTokenBucket || c.cost == 0 ||
            !core::TokenBucketStartsOnDenial(p)) {
          continue;
        }
        auto it = entries_.find(std::string(c.key));
        if (it != entries_.end() && !core::TokenBucketIsNew(p, it->second.word.bucket, now))
          continue;
        Entry& e = entries_[std::string(c.key)];
        e.algorithm = p.algorithm;
        core::TokenBucketStart(p, now, &e.word.bucket, &e.expires);
      }
      if (!all_allowed) Charge(checks, now, out);
      return Status::Ok();
    }
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const StoreCheck& c = checks[i];
      if (c.cost == 0) continue;
      const Policy& p = *c.policy;
      Entry& e = entries_[std::string(c.key)];
      e.algorithm = p.algorithm;
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        core::SlidingWindowLogCommit(p, e.log, now, c.cost, &e.expires);
      } else {
        e.word = next[i].word;
        e.expires = next[i].expires;
      }
    }
    return Status::Ok();
  }

  // Overage (Policy::overage): a denied batch's charging checks take per their rule,
  // on the pure charge functions (core::OverageBound).
  void Charge(std::span<const StoreCheck> checks, Micros now, std::span<Decision> out) {
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const StoreCheck& c = checks[i];
      const Policy& p = *c.policy;
      if (c.cost == 0 || p.overage == Overage::kReject) continue;
      auto it = entries_.find(std::string(c.key));
      const bool fresh = it == entries_.end() || (drop_expired_ && it->second.expires <= now);
      Entry& e = entries_[std::string(c.key)];
      e.algorithm = p.algorithm;
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        out[i] =
            core::SlidingWindowLogCharge(p, e.log, now, c.cost, core::OverageBound(p), &e.expires);
      } else {
        const Entry in = e;
        out[i] = core::WordOpsOf(p.algorithm)
                     ->charge(p, in.word, fresh, now, c.cost, &e.word, &e.expires);
      }
      out[i].allowed = false;
    }
  }

  // kRefund on the pure refund functions: a key with no state, another algorithm's,
  // or a word state back to full has nothing to give back.
  Status Refund(std::span<const StoreCheck> checks, Micros now) {
    for (const StoreCheck& c : checks) {
      const Policy& p = *c.policy;
      auto it = entries_.find(std::string(c.key));
      if (it == entries_.end() || it->second.algorithm != p.algorithm) continue;
      Entry& e = it->second;
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        core::SlidingWindowLogRefund(p, e.log, now, c.cost, &e.expires);
        continue;
      }
      if (e.expires <= now) continue;
      const Entry in = e;
      core::WordOpsOf(p.algorithm)->refund(p, in.word, now, c.cost, &e.word, &e.expires);
    }
    return Status::Ok();
  }

  struct Entry {
    Algorithm algorithm = Algorithm::kFixedWindow;
    core::WordState word;
    DequeLog log;
    Micros expires = 0;
  };
  bool drop_expired_;
  std::map<std::string, Entry> entries_;
};

}  // namespace sluice::testing
