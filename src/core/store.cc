// Store's default refund: stores that cannot give budget back say so. (The default
// EvaluateAsync lives with the Limiter.)
#include "sluice/store.h"

namespace sluice {

Status Store::Refund(std::span<const StoreCheck> checks, Micros now) {
  (void)checks;
  (void)now;
  return Status::Internal("this store does not support Refund");
}

void Store::RefundAsync(std::span<const StoreCheck> checks, Micros now, RefundCallback done) {
  done(Refund(checks, now));
}

}  // namespace sluice
