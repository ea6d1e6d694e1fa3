// One Rate Limit Quota Service stream (docs/rlqs.md): Envoy's usage reports for its
// buckets come in, assignments go out. A bucket id becomes a descriptor of sluiced's rules
// (RlqsSettings::descriptor_keys). A limited bucket's assignment is paid for before it is
// sent: its units are taken from the shared store in one decision of cost N (as a hot-key
// lease takes its slice), so many Envoys (and sluiced instances) share one global limit.
//
// Envoy 1.40 treats an assigned token bucket as a rate: a replacement starts with the old
// one's fill ratio, and a resent identical one keeps its tokens and gets a new TTL. So an
// assignment of N units is the token bucket {max_tokens: ceil(N/2), tokens_per_fill:
// floor(N/2), fill_interval: the TTL}, which admits at most N during one TTL, and:
//  - no assignment yet, or the last one expired (or a reload): take a fresh slice of N
//    units, N from the bucket's reported demand (Sized), at most slice * capacity (the
//    first one; a bucket's first decision takes 1 unit, to learn the capacity); when the
//    store denies N, halves of it, down to 1;
//  - a token bucket that would expire before the report after next: take its refill
//    (tokens_per_fill units) and resend it with a new TTL (Envoy keeps its tokens), or a
//    fresh slice when the demand calls for at most half or more than twice its size;
//  - the store denies: DENY_ALL until the store's reset (or the TTL);
//  - no rule matches: ALLOW_ALL, or abandon_action when the bucket had a rule before (a
//    reload removed it: Envoy forgets the bucket).
// An assignment's TTL never runs past the window the store reported (Decision::
// reset_after) but for Envoy's whole-second rounding.
//
// The bound: Envoy admits from a token bucket at most max_tokens + tokens_per_fill per
// TTL it lives, and each of them was charged first, so what Envoys admit from assignments
// never exceeds what the store allowed. What is charged and not used goes back to the
// store (Settle) once the reports show that Envoy can no longer spend it: a refund never
// exceeds what was charged less what Envoy reported allowed and what it may still spend
// after its last report (each token bucket it may use: max_tokens and the refill until
// 1 s past the bucket's end). Requests admitted by Envoy's own no_assignment /
// expired_assignment behaviour are outside the bound (docs/rlqs.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "envoy/service/rate_limit_quota/v3/rlqs.pb.h"
#include "service/engine.h"
#include "service/rlqs_config.h"
#include "sluice/status.h"

namespace sluice::service {

namespace rlqs_pb = ::envoy::service::rate_limit_quota::v3;

// The descriptor entries of bucket id `bucket` under `s` (viewing into `bucket`): the keys
// of s.descriptor_keys in that order (absent ones left out), or every key sorted by name
// when it is empty. Empty: nothing of the bucket forms a descriptor.
std::vector<Entry> BucketDescriptor(const RlqsSettings& s,
                                    const google::protobuf::Map<std::string, std::string>& bucket);

// One stream's buckets. Not thread-safe: one message at a time (the next Handle only
// after the previous one's `done` ran).
class RlqsSession {
 public:
  explicit RlqsSession(Engine& engine);
  ~RlqsSession();
  RlqsSession(const RlqsSession&) = delete;
  RlqsSession& operator=(const RlqsSession&) = delete;

  using Done = std::function<void(const Status& status, rlqs_pb::RateLimitQuotaResponse& out)>;
  // Folds message `msg` into the stream's buckets and decides their assignments. `done`
  // runs exactly once (inline, or on the store's thread) with the actions to send (maybe
  // none). A non-OK status ends the stream: InvalidArgument (no domain in the first
  // message, a changed domain, an empty or non-UTF-8 bucket id, a bad descriptor),
  // ResourceExhausted (more buckets than rlqs.max_buckets_per_stream), or the engine's.
  void Handle(const rlqs_pb::RateLimitQuotaUsageReports& msg, Done done);

  // Settles each bucket Envoy has gone silent on by `now` (engine clock) as if the stream
  // had ended: a bucket whose assignments were charged and that was not reported for two
  // of its reporting intervals plus the delivery bound gets back what was charged beyond
  // what Envoy reported allowed and may still spend after its last report. Once per
  // silence (a report ends it); the bucket's ledger stays open for its next report. Only
  // between messages (not while a Handle's decisions run).
  void Sweep(Micros now);
  // When the next bucket goes silent (engine clock), or 0 when none can: the time to call
  // Sweep at, after each message and each Sweep.
  Micros NextSilence() const;

  std::size_t buckets() const { return buckets_.size(); }
  const std::string& domain() const { return domain_; }

  struct Bucket;
  struct Pending;
  struct Spend;

 private:
  static std::uint64_t MaySpend(const Spend& s, Micros t);
  // Adds `n` to `field`, or one to the action's count, in the totals and in `b`'s series.
  void Count(const Bucket& b, std::atomic<std::uint64_t> RlqsBucketCounters::*field,
             std::uint64_t n);
  void Count(const Bucket& b, RlqsBucketCounters::Action action);
  // When `b` goes silent, or 0 when it cannot (nothing charged that may come back, or
  // settled for this silence already).
  static Micros SilentAt(const Bucket& b);
  // Gives back what `b` was charged and Envoy can no longer spend (`ending`: the stream
  // ended or went silent, nothing waits for a larger amount). `then`, when given, runs
  // once the store answered the refund (inline when there is none).
  void Settle(Bucket& b, bool ending, std::function<void()> then = nullptr);
  // The current token bucket of `b`, if any, is replaced at `now`.
  static void EndTokens(Bucket& b, Micros now);
  // The next fresh slice of `b` from its reported demand (resets the demand).
  std::uint64_t Sized(Bucket& b);
  Status Validate(const rlqs_pb::RateLimitQuotaUsageReports& msg);
  // What `b` needs at `now` after its report; may start decisions (counted in `p`).
  void Plan(Bucket& b, Micros now, const std::shared_ptr<Pending>& p);
  // Takes `want` units for `b` from the store: a renewal's refill, or part of a fresh
  // slice of which `got` units are taken already.
  void Take(Bucket& b, std::uint64_t want, std::uint64_t got, bool renew,
            const std::shared_ptr<Pending>& p);
  void Decided(Bucket& b, std::uint64_t want, std::uint64_t got, bool renew, const Status& s,
               const RateLimitResponse& r, const std::shared_ptr<Pending>& p);
  // A fresh token bucket of `units`, or (0) the current one resent with a new TTL.
  void AssignTokens(Bucket& b, std::uint64_t units, Micros now, Pending& p);
  void AssignBlanket(Bucket& b, bool deny, Micros ttl, Micros now, Pending& p);

  Engine& engine_;
  std::shared_ptr<const Settings> settings_;
  std::string domain_;
  // By canonical bucket id (its key=value pairs sorted).
  std::unordered_map<std::string, std::unique_ptr<Bucket>> buckets_;
};

}  // namespace sluice::service
