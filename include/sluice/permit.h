// sluice/permit.h: a held slot of a concurrency limit (issue #12 item 1).
//
//   sluice::LimiterOptions o;
//   o.policies = {sluice::Policy::Concurrency("inflight", 10, std::chrono::seconds(30)),
//                 sluice::Policy::TokenBucket("rate", 100, 100, std::chrono::seconds(1))};
//   auto limiter = sluice::Limiter::Create(std::move(o));
//   auto permit = (*limiter)->AcquirePermit("user:42");   // slot + rate, atomically
//   if (permit.ok() && permit->held()) {
//     ... do the work (permit->Extend() for long work) ...
//   }  // the permit is released here
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/decision.h"
#include "sluice/permit_id.h"
#include "sluice/status.h"

namespace sluice {

class Limiter;

// A permit taken by Limiter::AcquirePermit. While held it occupies one of the
// max_in_flight slots of its key under every concurrency policy of its limiter, until
// it is released or its lease passes (then it expires by itself: crash safety).
//
// Movable, not copyable; the destructor releases a held permit (best effort: an error
// is counted in LimiterStats::permit_release_errors and the permit then expires after
// its lease). Not thread-safe: one thread at a time per Permit. A Permit must not
// outlive the Limiter that made it.
class Permit {
 public:
  // An empty permit: holds nothing.
  Permit() = default;
  ~Permit();
  Permit(Permit&& other) noexcept;
  // Releases what this permit holds (as the destructor does), then takes `other`'s.
  Permit& operator=(Permit&& other) noexcept;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;

  // True from an allowed AcquirePermit until Release, Detach or a move. A permit whose
  // lease has passed (not extended) is still held() here but gone from the store.
  bool held() const { return held_; }
  explicit operator bool() const { return held_; }
  // The permit's id (kPermitIdLength hex characters), made by the limiter; also set
  // when the acquisition was denied (then nothing holds it).
  const std::string& id() const { return id_; }
  // The caller key the permit was acquired for (of the first check, for the form with
  // checks).
  const std::string& key() const { return key_; }
  // The binding decision of the acquisition: allowed, remaining (free slots after this
  // one, or the least remaining of the rate policies), retry_after when denied (for a
  // concurrency denial: until the earliest held permit expires), reset_after.
  const Decision& decision() const { return decision_; }

  // Frees the permit's slots now. Errors: NotFound naming the permit when it is not
  // held (never acquired, released already, or released elsewhere by id) or when the
  // store no longer has it (its lease passed: it expired and its slot was free
  // already); Unavailable / DeadlineExceeded from the store, returned as is (the
  // permit then expires after its lease). In every case held() is false after.
  // A permit allowed by FailureMode::kFailOpen holds nothing in the store: its Release
  // is a no-op that succeeds.
  Status Release();

  // Moves the permit's expiry to now + lease under each concurrency policy (long work).
  // Errors: NotFound naming the permit when it is not held or has expired (its slot
  // may have been given to another caller: the work should stop); store errors as is
  // (the permit stays held() and may still be extended or released).
  Status Extend();

  // Stops managing the permit without releasing it and returns its id (empty when not
  // held): the caller releases it later by id (Limiter::Release), or it expires after
  // its lease.
  std::string Detach();

 private:
  friend class Limiter;
  // One slot the permit holds: a concurrency policy (index in the limiter) and caller
  // key, in the limiter's store or in its local fallback store (a kLocalFallback
  // decision). A fail-open slot is held nowhere and not listed.
  struct Slot {
    std::uint16_t policy = 0;
    bool in_fallback = false;
    std::string key;
  };
  Limiter* limiter_ = nullptr;
  std::string key_;
  std::string id_;
  Decision decision_;
  std::vector<Slot> slots_;
  bool held_ = false;
};

}  // namespace sluice
