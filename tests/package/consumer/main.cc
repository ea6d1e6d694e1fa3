// Uses the installed sluice: a fixed window of 2 requests per minute on a manual
// clock must allow two requests, deny the third, and allow again a minute later.
#include <sluice/clock.h>
#include <sluice/limiter.h>
#include <sluice/policy.h>
#ifdef SLUICE_CONSUMER_HAS_REDIS
#include <sluice/redis_store.h>
#endif

#include <chrono>
#include <cstdio>
#include <memory>

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  auto clock = std::make_shared<sluice::ManualClock>(1785412800LL * 1'000'000);  // a minute start
  sluice::LimiterOptions options;
  options.policies = {sluice::Policy::FixedWindow("api", 2, std::chrono::minutes(1))};
  options.clock = clock;
  auto limiter = sluice::Limiter::Create(std::move(options));
  if (!limiter.ok()) {
    std::fprintf(stderr, "Limiter::Create failed: %s\n", limiter.status().ToString().c_str());
    return 1;
  }
  auto& l = **limiter;
  auto a = l.Acquire("user:42");
  auto b = l.Acquire("user:42");
  auto c = l.Acquire("user:42");
  Expect(a.ok() && a->allowed && a->remaining == 1, "first request allowed, 1 remaining");
  Expect(b.ok() && b->allowed && b->remaining == 0, "second request allowed, 0 remaining");
  Expect(c.ok() && !c->allowed, "third request denied");
  Expect(c.ok() && c->retry_after == 60'000'000, "retry after the minute");
  clock->Advance(60'000'000);
  auto d = l.Acquire("user:42");
  Expect(d.ok() && d->allowed, "allowed again in the next window");
  auto bad = sluice::Policy::FixedWindow("", 0, std::chrono::minutes(1));
  Expect(!sluice::ValidatePolicy(bad).ok(), "an invalid policy is rejected");
#ifdef SLUICE_CONSUMER_HAS_REDIS
  // Calls into sluice::redis (so that it and hiredis really get linked) without
  // needing a server: a malformed URL is refused before any connection.
  auto redis = sluice::RedisStore::Create({.url = "redis://127.0.0.1:notaport"});
  Expect(!redis.ok() && redis.status().code() == sluice::ErrorCode::kInvalidArgument,
         "sluice::redis refuses a malformed URL");
  std::printf("sluice::redis linked\n");
#endif
  if (failures != 0) return 1;
  std::printf("sluice consumer ok\n");
  return 0;
}
