// The config's value types outside YAML: units, listen addresses, and the one
// conversion from a config rule to a sluice Policy (service/config.h).
#include <charconv>

#include "service/config.h"

namespace sluice::service {

Policy PolicyOf(const RateLimitSpec& s) {
  Policy p;
  p.algorithm = s.algorithm;
  p.limit = s.requests_per_unit;
  // A concurrency limit's "window" is its permit lease (Policy::Concurrency).
  p.window = s.algorithm == Algorithm::kConcurrency ? s.permit_lease
                                                    : UnitMicros(s.unit) * s.unit_multiplier;
  p.burst = s.burst;
  p.failure_mode = s.failure_mode;
  p.fallback_divisor = s.fallback_divisor;
  p.lease = s.lease;
  p.lease_validity = s.lease_validity;
  p.block_for = s.block_for;
  p.on_change = s.on_change.value_or(OnChange::kAsIs);
  p.overage = s.overage;
  p.max_debt = s.max_debt;
  return p;
}

std::vector<const RateLimitSpec*> LimitsOf(const DescriptorSpec& d) {
  std::vector<const RateLimitSpec*> out;
  if (d.has_rate_limit) out.push_back(&d.rate_limit);
  for (const RateLimitSpec& r : d.rate_limits) out.push_back(&r);
  return out;
}

const char* UnitName(Unit u) {
  switch (u) {
    case Unit::kSecond:
      return "second";
    case Unit::kMinute:
      return "minute";
    case Unit::kHour:
      return "hour";
    case Unit::kDay:
      return "day";
    case Unit::kWeek:
      return "week";
    case Unit::kMonth:
      return "month";
    case Unit::kYear:
      return "year";
    default:
      return "unknown";
  }
}

bool ValidUnit(int unit) {
  return unit >= 1 && unit <= 7;
}

Micros UnitMicros(Unit u) {
  switch (u) {
    case Unit::kSecond:
      return 1'000'000;
    case Unit::kMinute:
      return 60'000'000;
    case Unit::kHour:
      return 3'600'000'000;
    case Unit::kDay:
      return 86'400'000'000;
    case Unit::kWeek:
      return 7 * 86'400'000'000LL;
    case Unit::kMonth:
      return 30 * 86'400'000'000LL;
    case Unit::kYear:
      return 365 * 86'400'000'000LL;
    default:
      return 0;
  }
}

Status ValidateListenAddress(const std::string& addr) {
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("listen address must be ADDR:PORT (got '" + addr + "')");
  }
  const std::string port = addr.substr(colon + 1);
  unsigned v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (ec != std::errc() || p != port.data() + port.size() || port.empty() || v > 65535) {
    return Status::InvalidArgument("listen address '" + addr + "' has an invalid port '" + port +
                                   "'");
  }
  return Status::Ok();
}

}  // namespace sluice::service
