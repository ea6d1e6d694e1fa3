#include "service/rlqs_session.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <utility>

#include "core/utf8.h"

namespace sluice::service {

std::vector<Entry> BucketDescriptor(const RlqsSettings& s,
                                    const google::protobuf::Map<std::string, std::string>& bucket) {
  std::vector<Entry> out;
  if (s.descriptor_keys.empty()) {
    for (const auto& [k, v] : bucket) out.push_back(Entry{k, v});
    // A protobuf map has no order, and Envoy's bucket ids {a, b} and {b, a} are one bucket.
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
    return out;
  }
  for (const std::string& k : s.descriptor_keys) {
    if (auto it = bucket.find(k); it != bucket.end()) out.push_back(Entry{it->first, it->second});
  }
  return out;
}

namespace {

using Action = rlqs_pb::RateLimitQuotaResponse::BucketAction;

// The pairs of bucket id `id` (viewing into it), sorted by key.
std::vector<std::pair<std::string_view, std::string_view>> SortedPairs(
    const rlqs_pb::BucketId& id) {
  std::vector<std::pair<std::string_view, std::string_view>> kv(id.bucket().begin(),
                                                                id.bucket().end());
  std::sort(kv.begin(), kv.end());
  return kv;
}

// The bucket id as one string: its pairs sorted by key, each "<len>:key<len>:value".
std::string CanonicalId(const rlqs_pb::BucketId& id) {
  std::string out;
  for (const auto& [k, v] : SortedPairs(id)) {
    out += std::to_string(k.size()) + ":" + std::string(k) + std::to_string(v.size()) + ":" +
           std::string(v);
  }
  return out;
}

// `id` for reading in a metric label: its key=value pairs sorted by key, comma-separated.
std::string ReadableId(const rlqs_pb::BucketId& id) {
  std::string out;
  for (const auto& [k, v] : SortedPairs(id)) {
    if (!out.empty()) out += ',';
    out.append(k).append("=").append(v);
  }
  return out;
}

// The largest token bucket Envoy takes (max_tokens is a uint32).
constexpr std::uint64_t kMaxTokens = std::numeric_limits<std::uint32_t>::max();

// What the refunds assume of the network: an assignment reaches Envoy, and a report
// reaches sluiced, within this much time together (docs/rlqs.md, "Unused quota").
constexpr Micros kDeliveryBound = 1'000'000;

}  // namespace

// A token bucket assigned to Envoy, while Envoy may still spend from it unreported.
struct RlqsSession::Spend {
  std::uint64_t max_tokens = 0;
  std::uint64_t tokens_per_fill = 0;
  Micros fill = 1;  // fill_interval
  Micros end = 0;   // its TTL's end, or when sluiced sent what replaced it (engine clock)
};

// The most Envoy may admit from `s` after a report that reached sluiced at `t`: the
// tokens it held then (at most max_tokens) and the refill until the bucket's end in
// Envoy, which is at most kDeliveryBound after `s.end` counted from the report's making.
// 0 once the report was made after that end.
std::uint64_t RlqsSession::MaySpend(const Spend& s, Micros t) {
  if (s.end + kDeliveryBound <= t) return 0;
  const auto left = static_cast<unsigned __int128>(s.end + kDeliveryBound - t);
  const unsigned __int128 refill = (s.tokens_per_fill * left + s.fill - 1) / s.fill;
  return s.max_tokens + static_cast<std::uint64_t>(std::min<unsigned __int128>(refill, kMaxTokens));
}

struct RlqsSession::Bucket {
  rlqs_pb::BucketId id;
  RlqsBucketCounters* counters = nullptr;  // this bucket id's series (Metrics::RlqsBucket)
  enum class Kind { kNone, kTokens, kDenyAll, kAllowAll } kind = Kind::kNone;
  bool had_rule = false;              // a rule matched this bucket's last decision
  std::uint64_t slice = 0;            // units of a fresh assignment; 0: capacity not known yet
  std::uint32_t max_tokens = 0;       // the token bucket assigned
  std::uint32_t tokens_per_fill = 0;  // ... and its refill per fill_seconds
  std::int64_t fill_seconds = 0;
  Micros expires = 0;                  // the current assignment's end (engine clock)
  Micros horizon = 0;                  // the store's reset for the units of this assignment
  Micros interval = 1'000'000;         // Envoy's reporting interval, from time_elapsed
  std::uint64_t rules_generation = 0;  // the engine's config when last decided
  bool abandon = false;                // drop after this message
  std::uint64_t units = 0;             // units of the current token bucket's fresh slice
  // The ledger of unused quota (Settle): units the stream's assignments were charged in
  // the store, requests Envoy reported allowed and units given back, since the last
  // time Envoy held no token bucket; the token buckets it may still spend from.
  std::uint64_t charged = 0, allowed = 0, refunded = 0;
  // The rules generation of the ledger's charges; `mixed`: charged under several (a
  // reload may have moved the limit to another key: nothing is refunded until it closes).
  std::uint64_t charged_generation = 0;
  bool mixed = false;
  Micros last_report = 0;  // when the last report arrived (engine clock)
  bool swept = false;      // settled by Sweep since the last report
  std::vector<Spend> spends;
  // Demand (allowed + denied) reported since the last sizing, and the time it covers.
  std::uint64_t demand = 0;
  Micros demand_time = 0;
};

// One message's decisions in flight, and the response they fill.
struct RlqsSession::Pending {
  std::mutex mu;
  int outstanding = 1;  // Handle's own reference, released after planning
  Status error = Status::Ok();
  rlqs_pb::RateLimitQuotaResponse out;
  Done done;
  RlqsSession* session = nullptr;
  // Adds `a` (under mu).
  void Add(Action a) {
    std::lock_guard<std::mutex> lock(mu);
    *out.add_bucket_action() = std::move(a);
  }
  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = s;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (--outstanding > 0) return;
    }
    // The last reference: every decision of the message is done.
    for (auto it = session->buckets_.begin(); it != session->buckets_.end();) {
      it = it->second->abandon ? session->buckets_.erase(it) : std::next(it);
    }
    if (!error.ok()) out.Clear();
    done(error, out);
  }
};

RlqsSession::RlqsSession(Engine& engine) : engine_(engine) {
  engine_.metrics().rlqs().streams_opened.fetch_add(1, std::memory_order_relaxed);
}

RlqsSession::~RlqsSession() {
  // The stream ended: Envoy may still spend what it held at its last report (it keeps its
  // assignments until their TTL), the rest goes back now.
  for (auto& [key, b] : buckets_) Settle(*b, /*ending=*/true);
  engine_.metrics().rlqs().streams_closed.fetch_add(1, std::memory_order_relaxed);
}

void RlqsSession::Count(const Bucket& b, std::atomic<std::uint64_t> RlqsBucketCounters::*field,
                        std::uint64_t n) {
  (engine_.metrics().rlqs().*field).fetch_add(n, std::memory_order_relaxed);
  (b.counters->*field).fetch_add(n, std::memory_order_relaxed);
}

void RlqsSession::Count(const Bucket& b, RlqsBucketCounters::Action action) {
  engine_.metrics().rlqs().assignments[action].fetch_add(1, std::memory_order_relaxed);
  b.counters->assignments[action].fetch_add(1, std::memory_order_relaxed);
}

void RlqsSession::Settle(Bucket& b, bool ending, std::function<void()> then) {
  if (settings_ == nullptr) {
    if (then) then();
    return;
  }
  const Micros t = b.last_report;
  std::erase_if(b.spends, [t](const Spend& s) { return s.end + kDeliveryBound <= t; });
  std::uint64_t held = b.allowed + b.refunded;
  for (const Spend& s : b.spends) held += MaySpend(s, t);
  const std::uint64_t back = b.charged > held ? b.charged - held : 0;
  // Nothing left that Envoy may spend: the ledger closes (and starts over with the next
  // charge). While it may, refunds wait for a refill's worth (one store call per refill).
  const bool closed = b.spends.empty();
  std::uint64_t generation = 0;
  engine_.rules(&generation);
  const bool same_rules = !b.mixed && generation == b.charged_generation;
  const bool refund = back > 0 && same_rules &&
                      (ending || closed || back >= std::max<std::uint64_t>(1, b.tokens_per_fill));
  if (refund) b.refunded += back;
  if (closed) {
    b.charged = b.allowed = b.refunded = 0;
    b.mixed = false;
  }
  if (!refund) {
    if (then) then();
    return;
  }
  // The ledger is up to date before the refund goes out: `then` may charge the bucket
  // again, inline or on the store's thread.
  DescriptorRequest d;
  d.entries = BucketDescriptor(settings_->rlqs, b.id.bucket());
  engine_.RefundAsync(domain_, d, back,
                      [total = &engine_.metrics().rlqs(), bucket = b.counters,
                       then = std::move(then)](std::uint64_t n) {
                        total->refunded_units.fetch_add(n, std::memory_order_relaxed);
                        bucket->refunded_units.fetch_add(n, std::memory_order_relaxed);
                        if (then) then();
                      });
}

Micros RlqsSession::SilentAt(const Bucket& b) {
  if (b.swept || b.charged <= b.allowed + b.refunded) return 0;
  return b.last_report + 2 * b.interval + kDeliveryBound;
}

void RlqsSession::Sweep(Micros now) {
  for (auto& [key, b] : buckets_) {
    const Micros at = SilentAt(*b);
    if (at == 0 || now < at) continue;
    b->swept = true;
    Settle(*b, /*ending=*/true);
    Count(*b, &RlqsBucketCounters::silences, 1);
  }
}

Micros RlqsSession::NextSilence() const {
  Micros next = 0;
  for (const auto& [key, b] : buckets_) {
    const Micros at = SilentAt(*b);
    if (at != 0 && (next == 0 || at < next)) next = at;
  }
  return next;
}

void RlqsSession::EndTokens(Bucket& b, Micros now) {
  if (b.kind == Bucket::Kind::kTokens && !b.spends.empty()) {
    b.spends.back().end = std::min(b.spends.back().end, now);
  }
}

Status RlqsSession::Validate(const rlqs_pb::RateLimitQuotaUsageReports& msg) {
  if (!msg.domain().empty()) {
    if (!core::ValidUtf8(msg.domain())) return Status::InvalidArgument("domain is not valid UTF-8");
    if (domain_.empty()) {
      domain_ = msg.domain();
    } else if (msg.domain() != domain_) {
      return Status::InvalidArgument("the domain changed from '" + domain_ + "' to '" +
                                     msg.domain() +
                                     "' within one stream (open a new stream for another domain)");
    }
  }
  if (domain_.empty()) {
    return Status::InvalidArgument(
        "the first RateLimitQuotaUsageReports of a stream has no domain");
  }
  for (int i = 0; i < msg.bucket_quota_usages_size(); ++i) {
    const auto& u = msg.bucket_quota_usages(i);
    const std::string where = "bucket_quota_usages[" + std::to_string(i) + "].bucket_id";
    if (u.bucket_id().bucket().empty()) return Status::InvalidArgument(where + " is empty");
    for (const auto& [k, v] : u.bucket_id().bucket()) {
      if (k.empty() || v.empty())
        return Status::InvalidArgument(where + " has an empty key or value");
      if (!core::ValidUtf8(k) || !core::ValidUtf8(v))
        return Status::InvalidArgument(where + " has a key or value that is not valid UTF-8");
    }
  }
  return Status::Ok();
}

void RlqsSession::Handle(const rlqs_pb::RateLimitQuotaUsageReports& msg, Done done) {
  auto p = std::make_shared<Pending>();
  p->done = std::move(done);
  p->session = this;
  settings_ = engine_.settings_ptr();
  if (Status s = Validate(msg); !s.ok()) {
    p->Fail(s);
    return p->Release();
  }
  const Micros now = engine_.clock().Now();
  // Fold every report first, so that a bucket reported twice in one message is planned once.
  std::vector<Bucket*> touched;
  for (const auto& u : msg.bucket_quota_usages()) {
    std::string key = CanonicalId(u.bucket_id());
    auto it = buckets_.find(key);
    if (it == buckets_.end()) {
      const std::size_t max = settings_->rlqs.max_buckets_per_stream;
      if (buckets_.size() >= max) {
        p->Fail(Status::ResourceExhausted("more than " + std::to_string(max) +
                                          " buckets on one stream (rlqs.max_buckets_per_stream)"));
        return p->Release();
      }
      it = buckets_.emplace(std::move(key), std::make_unique<Bucket>()).first;
      it->second->id = u.bucket_id();
      it->second->counters = engine_.metrics().RlqsBucket(domain_, ReadableId(u.bucket_id()));
    }
    Bucket& b = *it->second;
    Count(b, &RlqsBucketCounters::reports, 1);
    Count(b, &RlqsBucketCounters::reported_allowed, u.num_requests_allowed());
    Count(b, &RlqsBucketCounters::reported_denied, u.num_requests_denied());
    const Micros elapsed = u.time_elapsed().seconds() * 1'000'000 + u.time_elapsed().nanos() / 1000;
    if (elapsed > 0) b.interval = std::min<Micros>(elapsed, 60'000'000);
    b.allowed += u.num_requests_allowed();
    b.demand += u.num_requests_allowed() + u.num_requests_denied();
    b.demand_time += std::max<Micros>(elapsed, 0);
    b.last_report = now;
    b.swept = false;
    if (std::find(touched.begin(), touched.end(), &b) == touched.end()) touched.push_back(&b);
  }
  for (Bucket* b : touched) {
    // Planned once the store has the refund, so that a fresh slice finds its units.
    {
      std::lock_guard<std::mutex> lock(p->mu);
      ++p->outstanding;
    }
    Settle(*b, /*ending=*/false, [this, b, now, p] {
      Plan(*b, now, p);
      p->Release();
    });
  }
  p->Release();
}

void RlqsSession::Plan(Bucket& b, Micros now, const std::shared_ptr<Pending>& p) {
  std::uint64_t generation = 0;
  engine_.rules(&generation);
  const bool reloaded = b.kind != Bucket::Kind::kNone && generation != b.rules_generation;
  if (reloaded || now >= b.expires || b.kind == Bucket::Kind::kNone) {
    return Take(b, b.slice == 0 ? 1 : Sized(b), 0, /*renew=*/false, p);
  }
  // A live token bucket is renewed (its next refill charged) when it would otherwise
  // expire before the report after next; DENY_ALL / ALLOW_ALL wait for their end. When
  // the demand calls for at most half its slice or more than twice it, a fresh slice of
  // that size replaces it.
  if (b.kind == Bucket::Kind::kTokens && b.expires - now <= 2 * b.interval) {
    const std::uint64_t want = Sized(b);
    if (want * 2 <= b.units || want > b.units * 2) return Take(b, want, 0, /*renew=*/false, p);
    Take(b, b.tokens_per_fill, 0, /*renew=*/true, p);
  }
}

std::uint64_t RlqsSession::Sized(Bucket& b) {
  // Four times the demand of one TTL at the rate reported since the last sizing (Envoy
  // may report only every few seconds: room for the demand to double before the next
  // sizing), between half the current slice (a bucket idle for a while shrinks in steps,
  // so a short pause does not leave it too small for the next burst) and the configured
  // slice.
  const std::uint64_t demand = std::exchange(b.demand, 0);
  const Micros time = std::exchange(b.demand_time, 0);
  if (time <= 0) return b.slice;
  const double per_ttl = static_cast<double>(demand) *
                         static_cast<double>(settings_->rlqs.assignment_ttl) /
                         static_cast<double>(time);
  const double want = std::ceil(4 * per_ttl);
  if (want >= static_cast<double>(b.slice)) return b.slice;
  return std::max<std::uint64_t>({1, b.units / 2, static_cast<std::uint64_t>(want)});
}

void RlqsSession::Take(Bucket& b, std::uint64_t want, std::uint64_t got, bool renew,
                       const std::shared_ptr<Pending>& p) {
  RateLimitRequest req;
  req.domain = domain_;
  req.descriptors.resize(1);
  req.descriptors[0].entries = BucketDescriptor(settings_->rlqs, b.id.bucket());
  req.descriptors[0].has_hits_addend = true;
  req.descriptors[0].hits_addend = want;
  req.skip_deny_cache = true;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    ++p->outstanding;
  }
  if (req.descriptors[0].entries.empty()) {
    // Nothing of the bucket forms a descriptor: no rule can match.
    RateLimitResponse none;
    none.statuses.resize(1);
    return Decided(b, want, got, renew, Status::Ok(), none, p);
  }
  engine_.rules(&b.rules_generation);
  engine_.ShouldRateLimitAsync(
      req, [this, &b, want, got, renew, p](const Status& s, RateLimitResponse& r) {
        Decided(b, want, got, renew, s, r, p);
      });
}

void RlqsSession::Decided(Bucket& b, std::uint64_t want, std::uint64_t got, bool renew,
                          const Status& s, const RateLimitResponse& r,
                          const std::shared_ptr<Pending>& p) {
  const Micros now = engine_.clock().Now();
  const Micros ttl = settings_->rlqs.assignment_ttl;
  if (!s.ok() || r.statuses.empty()) {
    p->Fail(s.ok() ? Status::Internal("no status for the bucket's descriptor") : s);
    return p->Release();
  }
  const DescriptorStatus& st = r.statuses[0];
  if (!st.has_limit) {
    if (b.had_rule) {
      // A reload removed the bucket's rule: Envoy forgets the bucket (and starts over).
      Action a;
      *a.mutable_bucket_id() = b.id;
      a.mutable_abandon_action();
      EndTokens(b, now);
      p->Add(std::move(a));
      Count(b, RlqsBucketCounters::kAbandon);
      b.abandon = true;
    } else {
      AssignBlanket(b, false, ttl, now, *p);
    }
    return p->Release();
  }
  b.had_rule = true;
  if (st.code != Code::kOverLimit) {
    Count(b, &RlqsBucketCounters::granted_units, want);
    // Units charged to the shared store (not those a failure mode granted).
    if (st.source == DecisionSource::kStore || st.source == DecisionSource::kLease) {
      if (b.charged == 0) b.charged_generation = b.rules_generation;
      b.mixed = b.mixed || b.charged_generation != b.rules_generation;
      b.charged += want;
    }
    const Micros horizon = now + (st.duration_until_reset > 0 ? st.duration_until_reset : ttl);
    if (renew) {
      b.horizon = std::min(b.horizon, horizon);
      AssignTokens(b, 0, now, *p);
      return p->Release();
    }
    got += want;
    b.horizon = got == want ? horizon : std::min(b.horizon, horizon);
    if (b.slice == 0) {
      // The first decision took 1 unit to learn the limit's capacity.
      const double f = settings_->rlqs.slice * static_cast<double>(st.capacity);
      b.slice = std::clamp<std::uint64_t>(static_cast<std::uint64_t>(f), 1, kMaxTokens);
      if (b.slice > got) {
        Take(b, b.slice - got, got, false, p);
        return p->Release();
      }
    }
    AssignTokens(b, got, now, *p);
    return p->Release();
  }
  // Denied (a denial reports nothing left): a smaller fresh slice may still fit what is
  // left; halving finds it in at most log2(want) more decisions. A renewal is all or
  // nothing: its refill is part of the token bucket Envoy holds.
  if (!renew && want > 1) {
    Take(b, want / 2, got, false, p);
    return p->Release();
  }
  if (!renew && got > 0) {
    AssignTokens(b, got, now, *p);
    return p->Release();
  }
  const Micros wait = st.duration_until_reset > 0 ? std::min(st.duration_until_reset, ttl) : ttl;
  AssignBlanket(b, true, wait, now, *p);
  p->Release();
}

void RlqsSession::AssignTokens(Bucket& b, std::uint64_t units, Micros now, Pending& p) {
  const std::int64_t period = std::max<std::int64_t>(1, settings_->rlqs.assignment_ttl / 1'000'000);
  if (units > 0) {
    // A fresh token bucket of `units`: half of them at once, the rest refilled over one
    // TTL (1 unit: no refill worth having, one token per 1000 TTLs).
    EndTokens(b, now);
    b.units = units;
    b.max_tokens = static_cast<std::uint32_t>((std::min(units, kMaxTokens) + 1) / 2);
    b.tokens_per_fill =
        static_cast<std::uint32_t>(std::max<std::uint64_t>(units - b.max_tokens, 1));
    b.fill_seconds = units > 1 ? period : period * 1000;
    b.spends.push_back(Spend{b.max_tokens, b.tokens_per_fill, b.fill_seconds * 1'000'000, now});
  }
  b.kind = Bucket::Kind::kTokens;
  // Envoy reads whole seconds of the TTL: at least 1, never past the store's reset but
  // for that second.
  const Micros left = b.horizon > now ? b.horizon - now : 0;
  const std::int64_t ttl_s =
      std::max<std::int64_t>(1, std::min<Micros>(settings_->rlqs.assignment_ttl, left) / 1'000'000);
  b.expires = now + ttl_s * 1'000'000;
  if (!b.spends.empty()) b.spends.back().end = b.expires;
  Action a;
  *a.mutable_bucket_id() = b.id;
  auto* q = a.mutable_quota_assignment_action();
  q->mutable_assignment_time_to_live()->set_seconds(ttl_s);
  auto* tb = q->mutable_rate_limit_strategy()->mutable_token_bucket();
  tb->set_max_tokens(b.max_tokens);
  tb->mutable_tokens_per_fill()->set_value(b.tokens_per_fill);
  tb->mutable_fill_interval()->set_seconds(b.fill_seconds);
  p.Add(std::move(a));
  Count(b, RlqsBucketCounters::kTokenBucket);
}

void RlqsSession::AssignBlanket(Bucket& b, bool deny, Micros ttl, Micros now, Pending& p) {
  EndTokens(b, now);
  b.kind = deny ? Bucket::Kind::kDenyAll : Bucket::Kind::kAllowAll;
  const std::int64_t ttl_s = std::max<std::int64_t>(1, ttl / 1'000'000);
  b.expires = now + ttl_s * 1'000'000;
  Action a;
  *a.mutable_bucket_id() = b.id;
  auto* q = a.mutable_quota_assignment_action();
  q->mutable_assignment_time_to_live()->set_seconds(ttl_s);
  q->mutable_rate_limit_strategy()->set_blanket_rule(
      deny ? ::envoy::type::v3::RateLimitStrategy::DENY_ALL
           : ::envoy::type::v3::RateLimitStrategy::ALLOW_ALL);
  p.Add(std::move(a));
  Count(b, deny ? RlqsBucketCounters::kDenyAll : RlqsBucketCounters::kAllowAll);
}

}  // namespace sluice::service
