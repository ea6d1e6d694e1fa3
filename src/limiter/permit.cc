// sluice::Permit (sluice/permit.h) and permit ids.
#include "sluice/permit.h"

#include <unistd.h>

#include <cstdint>
#include <random>
#include <utility>

#include "limiter/permit_internal.h"
#include "sluice/limiter.h"

namespace sluice {

namespace permit_internal {
namespace {

// xoshiro256** (public domain, Blackman and Vigna): fast, 256 bits of state.
struct Xoshiro {
  std::uint64_t s[4];
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t Next() {
    const std::uint64_t r = Rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = Rotl(s[3], 45);
    return r;
  }
};

}  // namespace

std::string NewPermitId() {
  thread_local Xoshiro rng{};
  thread_local pid_t seeded_for = -1;
  const pid_t pid = ::getpid();
  if (seeded_for != pid) {
    std::random_device rd;
    for (std::uint64_t& w : rng.s) {
      w = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }
    rng.s[0] ^= static_cast<std::uint64_t>(pid);
    if ((rng.s[0] | rng.s[1] | rng.s[2] | rng.s[3]) == 0) rng.s[0] = 1;
    seeded_for = pid;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(kPermitIdLength, '0');
  for (std::size_t w = 0; w < kPermitIdLength / 16; ++w) {
    std::uint64_t v = rng.Next();
    for (std::size_t i = 0; i < 16; ++i) {
      id[w * 16 + i] = kHex[v >> 60];
      v <<= 4;
    }
  }
  return id;
}

}  // namespace permit_internal

bool IsPermitId(std::string_view id) {
  if (id.size() != kPermitIdLength) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Permit::~Permit() {
  if (held_ && limiter_ != nullptr) {
    Status s = limiter_->PermitCall(*this, StoreOp::kRelease);
    // NotFound: it expired already (its slot is free); anything else is counted.
    if (!s.ok() && s.code() != ErrorCode::kNotFound) limiter_->CountReleaseError();
  }
}

Permit::Permit(Permit&& other) noexcept
    : limiter_(other.limiter_),
      key_(std::move(other.key_)),
      id_(std::move(other.id_)),
      decision_(other.decision_),
      slots_(std::move(other.slots_)),
      held_(other.held_) {
  other.held_ = false;
  other.slots_.clear();
}

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this != &other) {
    Permit old(std::move(*this));  // released when `old` goes
    limiter_ = other.limiter_;
    key_ = std::move(other.key_);
    id_ = std::move(other.id_);
    decision_ = other.decision_;
    slots_ = std::move(other.slots_);
    held_ = other.held_;
    other.held_ = false;
    other.slots_.clear();
  }
  return *this;
}

Status Permit::Release() {
  if (!held_ || limiter_ == nullptr) {
    return Status::NotFound("permit '" + id_ + "' of key '" + key_ +
                            "' is not held (its acquisition was denied, or it was released, "
                            "detached or moved already)");
  }
  held_ = false;
  return limiter_->PermitCall(*this, StoreOp::kRelease);
}

Status Permit::Extend() {
  if (!held_ || limiter_ == nullptr) {
    return Status::NotFound("permit '" + id_ + "' of key '" + key_ +
                            "' is not held (its acquisition was denied, or it was released, "
                            "detached or moved already): it cannot be extended");
  }
  return limiter_->PermitCall(*this, StoreOp::kExtend);
}

std::string Permit::Detach() {
  if (!held_) return {};
  held_ = false;
  return id_;
}

}  // namespace sluice
