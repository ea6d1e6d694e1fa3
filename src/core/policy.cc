// Policy names, validation and parsing of rates and durations.
#include "sluice/policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "core/algorithm_ops.h"

namespace sluice {
namespace {

constexpr std::uint64_t kMaxLimit = 1'000'000'000'000ULL;  // exact in Lua's doubles
constexpr std::uint64_t kMaxLogLimit = 1'000'000;          // one entry per unit per key
constexpr std::uint64_t kMaxInFlight = 1'000'000;          // one entry per permit per key
constexpr Micros kMinWindow = 1'000;                       // 1 ms
constexpr Micros kMaxWindow = 366LL * 24 * 3600 * 1'000'000;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::string Fail(const Policy& p, const std::string& what) {
  return "policy '" + p.name + "': " + what;
}

struct Unit {
  std::string_view name;
  Micros micros;
};
constexpr Unit kUnits[] = {
    {"us", 1},
    {"ms", 1'000},
    {"s", 1'000'000},
    {"sec", 1'000'000},
    {"second", 1'000'000},
    {"m", 60'000'000},
    {"min", 60'000'000},
    {"minute", 60'000'000},
    {"h", 3'600'000'000},
    {"hour", 3'600'000'000},
    {"d", 86'400'000'000},
    {"day", 86'400'000'000},
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kFixedWindow:
      return "fixed_window";
    case Algorithm::kSlidingWindowLog:
      return "sliding_window_log";
    case Algorithm::kSlidingWindowCounter:
      return "sliding_window_counter";
    case Algorithm::kTokenBucket:
      return "token_bucket";
    case Algorithm::kGcra:
      return "gcra";
    case Algorithm::kConcurrency:
      return "concurrency";
  }
  return "unknown";
}

Result<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name == "fixed_window" || name == "fixed") return Algorithm::kFixedWindow;
  if (name == "sliding_window_log" || name == "sliding_log") return Algorithm::kSlidingWindowLog;
  if (name == "sliding_window_counter" || name == "sliding_counter")
    return Algorithm::kSlidingWindowCounter;
  if (name == "token_bucket" || name == "bucket") return Algorithm::kTokenBucket;
  if (name == "gcra") return Algorithm::kGcra;
  if (name == "concurrency") return Algorithm::kConcurrency;
  return Status::InvalidArgument("unknown algorithm '" + std::string(name) +
                                 "' (expected fixed_window, sliding_window_log, "
                                 "sliding_window_counter, token_bucket, gcra or concurrency)");
}

const char* FailureModeName(FailureMode m) {
  switch (m) {
    case FailureMode::kFailOpen:
      return "fail_open";
    case FailureMode::kFailClosed:
      return "fail_closed";
    case FailureMode::kLocalFallback:
      return "local_fallback";
  }
  return "unknown";
}

Result<FailureMode> ParseFailureMode(std::string_view name) {
  if (name == "fail_open" || name == "open") return FailureMode::kFailOpen;
  if (name == "fail_closed" || name == "closed") return FailureMode::kFailClosed;
  if (name == "local_fallback" || name == "fallback") return FailureMode::kLocalFallback;
  return Status::InvalidArgument("unknown failure mode '" + std::string(name) +
                                 "' (expected fail_open, fail_closed or local_fallback)");
}

const char* OnChangeName(OnChange m) {
  switch (m) {
    case OnChange::kReset:
      return "reset";
    case OnChange::kProportional:
      return "proportional";
    case OnChange::kAsIs:
      return "as_is";
  }
  return "unknown";
}

Result<OnChange> ParseOnChange(std::string_view name) {
  if (name == "reset") return OnChange::kReset;
  if (name == "proportional") return OnChange::kProportional;
  if (name == "as_is") return OnChange::kAsIs;
  return Status::InvalidArgument("unknown on_change mode '" + std::string(name) +
                                 "' (expected reset, proportional or as_is)");
}

const char* OverageName(Overage o) {
  switch (o) {
    case Overage::kReject:
      return "reject";
    case Overage::kCharge:
      return "charge";
    case Overage::kDrain:
      return "drain";
  }
  return "unknown";
}

Result<Overage> ParseOverage(std::string_view name) {
  if (name == "reject") return Overage::kReject;
  if (name == "charge") return Overage::kCharge;
  if (name == "drain") return Overage::kDrain;
  return Status::InvalidArgument("unknown overage '" + std::string(name) +
                                 "' (expected reject, charge or drain)");
}

std::uint64_t Policy::DebtBound() const {
  if (overage != Overage::kCharge) return 0;
  return max_debt == 0 ? Capacity() : max_debt;
}

std::uint64_t Policy::MaxCost() const {
  if (overage == Overage::kReject) return Capacity();
  return std::max(Capacity(), kMaxChargeCost);
}

std::uint64_t Policy::Capacity() const {
  if (algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra) {
    return burst == 0 ? limit : burst;
  }
  return limit;
}

Policy Policy::FixedWindow(std::string name, std::uint64_t limit,
                           std::chrono::microseconds window) {
  Policy p;
  p.name = std::move(name);
  p.algorithm = Algorithm::kFixedWindow;
  p.limit = limit;
  p.window = window.count();
  return p;
}

Policy Policy::SlidingWindowLog(std::string name, std::uint64_t limit,
                                std::chrono::microseconds window) {
  Policy p = FixedWindow(std::move(name), limit, window);
  p.algorithm = Algorithm::kSlidingWindowLog;
  return p;
}

Policy Policy::SlidingWindowCounter(std::string name, std::uint64_t limit,
                                    std::chrono::microseconds window) {
  Policy p = FixedWindow(std::move(name), limit, window);
  p.algorithm = Algorithm::kSlidingWindowCounter;
  return p;
}

Policy Policy::TokenBucket(std::string name, std::uint64_t capacity, std::uint64_t tokens,
                           std::chrono::microseconds per) {
  Policy p = FixedWindow(std::move(name), tokens, per);
  p.algorithm = Algorithm::kTokenBucket;
  p.burst = capacity;
  return p;
}

Policy Policy::Gcra(std::string name, std::uint64_t limit, std::chrono::microseconds window,
                    std::uint64_t burst) {
  Policy p = FixedWindow(std::move(name), limit, window);
  p.algorithm = Algorithm::kGcra;
  p.burst = burst;
  return p;
}

Policy Policy::Concurrency(std::string name, std::uint64_t max_in_flight,
                           std::chrono::microseconds lease) {
  Policy p = FixedWindow(std::move(name), max_in_flight, lease);
  p.algorithm = Algorithm::kConcurrency;
  return p;
}

namespace {

// A concurrency policy's fields have names of their own (max_in_flight, lease).
Status ValidateConcurrency(const Policy& p) {
  if (p.limit == 0) return Status::InvalidArgument(Fail(p, "max_in_flight must be > 0"));
  if (p.limit > kMaxInFlight) {
    return Status::InvalidArgument(
        Fail(p, "max_in_flight must be at most 1000000 (got " + std::to_string(p.limit) + ")"));
  }
  if (p.window <= 0) {
    return Status::InvalidArgument(Fail(p, "lease must be more than 0 (got " +
                                               std::to_string(p.window) +
                                               "us): a permit nobody releases must expire"));
  }
  if (p.window < kMinWindow) {
    return Status::InvalidArgument(
        Fail(p, "lease must be at least 1ms (got " + std::to_string(p.window) + "us)"));
  }
  if (p.window > kMaxWindow)
    return Status::InvalidArgument(Fail(p, "lease must be at most 366 days"));
  if (p.burst != 0) {
    return Status::InvalidArgument(
        Fail(p, "burst applies to token_bucket and gcra only, not concurrency"));
  }
  if (p.initial_tokens) {
    return Status::InvalidArgument(Fail(p, "initial_tokens applies to token_bucket only"));
  }
  if (p.lease != 0 || p.lease_validity != 0) {
    return Status::InvalidArgument(
        Fail(p,
             "hot-key leases (lease, lease_validity) do not apply to concurrency; its "
             "permits' lease is the policy's window"));
  }
  if (p.block_for != 0) {
    return Status::InvalidArgument(Fail(p, "block_for does not apply to concurrency"));
  }
  if (p.on_change != OnChange::kAsIs) {
    return Status::InvalidArgument(Fail(p, "on_change does not apply to concurrency"));
  }
  if (p.overage != Overage::kReject || p.max_debt != 0) {
    return Status::InvalidArgument(
        Fail(p,
             "overage (and max_debt) do not apply to concurrency: a slot is held or not, "
             "there is no debt (only overage reject)"));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// True when `units` take more than 366 days (the longest window) to come back at p's
// rate, limit/window: a bucket's refill from empty, a debt's repayment.
bool OverAYearAtRate(const Policy& p, std::uint64_t units) {
  return static_cast<unsigned __int128>(units) * static_cast<unsigned __int128>(p.window) >
         static_cast<unsigned __int128>(kMaxWindow) * p.limit;
}

// The limit, window and the fields of the rate algorithms (ValidatePolicy's part).
Status ValidateRate(const Policy& p) {
  if (p.limit == 0) return Status::InvalidArgument(Fail(p, "limit must be > 0"));
  if (p.limit > kMaxLimit) {
    return Status::InvalidArgument(
        Fail(p, "limit must be at most 10^12 (got " + std::to_string(p.limit) + ")"));
  }
  if (p.algorithm == Algorithm::kSlidingWindowLog && p.limit > kMaxLogLimit) {
    return Status::InvalidArgument(
        Fail(p,
             "limit of a sliding_window_log must be at most 1000000 (it keeps one entry "
             "per request); use sliding_window_counter for larger limits"));
  }
  if (p.window < kMinWindow) {
    return Status::InvalidArgument(
        Fail(p, "window must be at least 1ms (got " + std::to_string(p.window) + "us)"));
  }
  if (p.window > kMaxWindow) {
    return Status::InvalidArgument(Fail(p, "window must be at most 366 days"));
  }
  const bool bucket = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra;
  if (!bucket && p.burst != 0) {
    return Status::InvalidArgument(
        Fail(p, std::string("burst applies to token_bucket and gcra only, not ") +
                    AlgorithmName(p.algorithm)));
  }
  if (p.burst > kMaxLimit) return Status::InvalidArgument(Fail(p, "burst must be at most 10^12"));
  if (bucket && OverAYearAtRate(p, p.Capacity())) {
    // (a TAT or a refill time would reach beyond a year ahead: burst 10^12 at one a day
    // is 10^25 us, out of a microsecond clock's range)
    return Status::InvalidArgument(
        Fail(p,
             "burst x window / limit (the time to refill from empty) must be at most 366 "
             "days (got " +
                 std::to_string(
                     static_cast<unsigned long long>(static_cast<unsigned __int128>(p.Capacity()) *
                                                     p.window / p.limit / 86'400'000'000ULL)) +
                 " days)"));
  }
  if (p.initial_tokens) {
    if (p.algorithm != Algorithm::kTokenBucket) {
      return Status::InvalidArgument(Fail(p, "initial_tokens applies to token_bucket only"));
    }
    if (*p.initial_tokens > p.Capacity()) {
      return Status::InvalidArgument(
          Fail(p, "initial_tokens (" + std::to_string(*p.initial_tokens) +
                      ") must not exceed the capacity (" + std::to_string(p.Capacity()) + ")"));
    }
  }
  return Status::Ok();
}

// Overage and its debt bound (ValidateFeatures' part).
Status ValidateOverage(const Policy& p) {
  if (static_cast<unsigned>(p.overage) > 2) {
    return Status::InvalidArgument(Fail(p, "overage is not a known mode"));
  }
  if (p.overage == Overage::kReject) {
    if (p.max_debt == 0) return Status::Ok();
    return Status::InvalidArgument(
        Fail(p, "max_debt applies to overage charge only (overage is reject)"));
  }
  if (p.lease != 0) {
    return Status::InvalidArgument(
        Fail(p, std::string("overage ") + OverageName(p.overage) +
                    " cannot be combined with lease (a lease decides locally, without the "
                    "store that keeps the debt)"));
  }
  if (p.overage == Overage::kDrain && p.max_debt != 0) {
    return Status::InvalidArgument(
        Fail(p, "max_debt applies to overage charge only (drain takes what remains, no debt)"));
  }
  const std::uint64_t debt = p.DebtBound();
  if (debt > kMaxLimit) {
    return Status::InvalidArgument(
        Fail(p, "max_debt must be at most 10^12 (got " + std::to_string(debt) + ")"));
  }
  if (p.algorithm == Algorithm::kSlidingWindowLog && debt > p.limit) {
    return Status::InvalidArgument(
        Fail(p, "max_debt of a sliding_window_log must be at most its limit (" +
                    std::to_string(p.limit) + ", got " + std::to_string(debt) +
                    "): its log holds the debt as entries"));
  }
  const bool rate = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra;
  // A bucket or GCRA repays debt at limit/window: debt x window / limit microseconds.
  if (rate && OverAYearAtRate(p, debt)) {
    return Status::InvalidArgument(
        Fail(p, "max_debt " + std::to_string(debt) +
                    " would take more than 366 days to repay at limit/window"));
  }
  return Status::Ok();
}

// Hot-key leases, carry-over and blocks (ValidatePolicy's part).
Status ValidateFeatures(const Policy& p) {
  if (p.lease != 0) {
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      return Status::InvalidArgument(
          Fail(p, "lease does not apply to sliding_window_log (an exact algorithm)"));
    }
    if (p.lease > p.Capacity()) {
      return Status::InvalidArgument(Fail(p, "lease (" + std::to_string(p.lease) +
                                                 ") must not exceed the capacity (" +
                                                 std::to_string(p.Capacity()) + ")"));
    }
  }
  // Carry-over: the O(1) algorithms only (a sliding log keeps its entries as they are).
  if (static_cast<unsigned>(p.on_change) > 2) {
    return Status::InvalidArgument(Fail(p, "on_change is not a known mode"));
  }
  if (p.on_change != OnChange::kAsIs && core::WordOpsOf(p.algorithm) == nullptr) {
    return Status::InvalidArgument(
        Fail(p, std::string("on_change ") + OnChangeName(p.on_change) + " does not apply to " +
                    AlgorithmName(p.algorithm) +
                    " (only as_is; reset and proportional apply to fixed_window, "
                    "sliding_window_counter, token_bucket and gcra)"));
  }
  if (p.lease_validity < 0 || p.lease_validity > p.window / 10) {
    return Status::InvalidArgument(
        Fail(p, "lease_validity must be 0 (window / 10) or up to window / 10 = " +
                    std::to_string(p.window / 10) + "us (got " + std::to_string(p.lease_validity) +
                    "us)"));
  }
  // Blocks (Policy::block_for).
  if (p.block_for < 0) {
    return Status::InvalidArgument(
        Fail(p, "block_for must not be negative (got " + std::to_string(p.block_for) + "us)"));
  }
  if (p.block_for > kMaxWindow) {
    return Status::InvalidArgument(
        Fail(p, "block_for must be at most 366 days (got " + std::to_string(p.block_for) + "us)"));
  }
  if (p.block_for > 0 && p.lease != 0) {
    return Status::InvalidArgument(
        Fail(p,
             "block_for cannot be combined with lease (a lease decides locally, without "
             "seeing the block)"));
  }
  return ValidateOverage(p);
}

}  // namespace

Status ValidatePolicy(const Policy& p) {
  if (p.name.empty() || p.name.size() > 64) {
    return Status::InvalidArgument("policy name must be 1-64 characters (got " +
                                   std::to_string(p.name.size()) + ")");
  }
  for (char c : p.name) {
    if (!IsNameChar(c)) {
      return Status::InvalidArgument(Fail(p, "name may only contain [A-Za-z0-9_.-]"));
    }
  }
  if (static_cast<unsigned>(p.algorithm) > 5) {
    return Status::InvalidArgument(Fail(p, "algorithm is not one of the six known ones"));
  }
  if (static_cast<unsigned>(p.failure_mode) > 2) {
    return Status::InvalidArgument(Fail(p, "failure_mode is not a known mode"));
  }
  if (p.fallback_divisor == 0) {
    return Status::InvalidArgument(Fail(p, "fallback_divisor must be >= 1"));
  }
  if (p.algorithm == Algorithm::kConcurrency) return ValidateConcurrency(p);
  if (Status s = ValidateRate(p); !s.ok()) return s;
  return ValidateFeatures(p);
}

namespace {

// The microseconds of unit name `unit` ("ms", "hours"), or 0 when it is none.
Micros UnitMicrosOf(std::string_view unit) {
  for (const Unit& u : kUnits) {
    if (unit == u.name || (unit.size() == u.name.size() + 1 && unit.back() == 's' &&
                           unit.substr(0, u.name.size()) == u.name && u.name.size() > 2)) {
      return u.micros;
    }
  }
  return 0;
}

// "duration '0.5ms' must be a whole number of its unit (write 500us)": the fraction
// `frac` (digits after the point) of `whole` units of `micros`, in the largest unit that
// holds it exactly.
std::string FractionError(std::string_view text, std::uint64_t whole, std::string_view frac,
                          Micros micros) {
  std::string why = "duration '" + std::string(text) + "' must be a whole number of its unit";
  unsigned __int128 scale = 1, num = whole;
  for (char c : frac) {
    if (scale > 1'000'000'000'000ULL) return why;
    num = num * 10 + static_cast<unsigned>(c - '0');
    scale *= 10;
  }
  const unsigned __int128 us = num * static_cast<unsigned __int128>(micros);
  if (us % scale != 0 || us / scale > static_cast<unsigned __int128>(INT64_MAX)) return why;
  const auto total = static_cast<std::uint64_t>(us / scale);
  const char* name = "us";
  std::uint64_t n = total;
  if (total % 1'000'000 == 0) {
    name = "s";
    n = total / 1'000'000;
  } else if (total % 1'000 == 0) {
    name = "ms";
    n = total / 1'000;
  }
  return why + " (write " + std::to_string(n) + name + ")";
}

}  // namespace

Result<Micros> ParseDuration(std::string_view text) {
  std::string_view s = Trim(text);
  if (!s.empty() && s[0] == '-') {
    return Status::InvalidArgument("duration '" + std::string(text) + "' must not be negative");
  }
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  std::uint64_t n = 1;
  if (i > 0) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, n);
    if (ec != std::errc() || n > 1'000'000'000'000ULL) {
      return Status::InvalidArgument("duration '" + std::string(text) + "' is out of range");
    }
  }
  if (i > 0 && i < s.size() && s[i] == '.') {
    std::size_t j = i + 1;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    const Micros micros = UnitMicrosOf(Trim(s.substr(j)));
    if (micros != 0 && j > i + 1) {
      return Status::InvalidArgument(FractionError(text, n, s.substr(i + 1, j - i - 1), micros));
    }
  }
  std::string_view unit = Trim(s.substr(i));
  // "0" is zero in any unit: it needs none.
  if (i > 0 && n == 0 && unit.empty()) return Micros{0};
  if (const Micros micros = UnitMicrosOf(unit); micros != 0) {
    if (n > static_cast<std::uint64_t>(INT64_MAX / micros)) {
      return Status::InvalidArgument("duration '" + std::string(text) + "' is out of range");
    }
    return static_cast<Micros>(n) * micros;
  }
  return Status::InvalidArgument("duration '" + std::string(text) +
                                 "' needs a unit: us, ms, s, m/min, h/hour or d/day");
}

Result<Rate> ParseRate(std::string_view text) {
  const std::string_view s = Trim(text);
  const std::size_t slash = s.find('/');
  if (slash == std::string_view::npos) {
    return Status::InvalidArgument("rate '" + std::string(text) +
                                   "' must look like COUNT/UNIT, e.g. 100/min or 0.5/s");
  }
  const std::string_view count = Trim(s.substr(0, slash));
  auto window = ParseDuration(s.substr(slash + 1));
  if (!window.ok()) {
    return Status::InvalidArgument("rate '" + std::string(text) +
                                   "': " + window.status().message());
  }
  // "15/0s" parsed as a zero window (found by tests/fuzz/rate_duration_fuzz.cc).
  if (*window <= 0) {
    return Status::InvalidArgument("rate '" + std::string(text) +
                                   "': the window must be more than 0");
  }
  // Count: an integer, or a decimal with up to 6 fractional digits.
  std::uint64_t whole = 0;
  std::uint64_t frac = 0;
  std::uint64_t scale = 1;
  std::size_t i = 0;
  bool digits = false;
  while (i < count.size() && count[i] >= '0' && count[i] <= '9') {
    whole = whole * 10 + static_cast<std::uint64_t>(count[i] - '0');
    digits = true;
    if (whole > kMaxLimit)
      return Status::InvalidArgument("rate '" + std::string(text) + "' is too large");
    ++i;
  }
  if (i < count.size() && count[i] == '.') {
    ++i;
    while (i < count.size() && count[i] >= '0' && count[i] <= '9') {
      if (scale >= 1'000'000) {
        return Status::InvalidArgument("rate '" + std::string(text) +
                                       "' has more than 6 decimal places");
      }
      frac = frac * 10 + static_cast<std::uint64_t>(count[i] - '0');
      scale *= 10;
      digits = true;
      ++i;
    }
  }
  if (!digits || i != count.size()) {
    return Status::InvalidArgument("rate '" + std::string(text) + "': '" + std::string(count) +
                                   "' is not a number");
  }
  std::uint64_t limit = whole * scale + frac;
  Micros w = *window;
  // Reduce the fraction limit / (w * scale) so the window stays as short as possible.
  std::uint64_t a = limit, b = scale;
  while (b != 0) {
    const std::uint64_t r = a % b;
    a = b;
    b = r;
  }
  const std::uint64_t g = limit == 0 ? 1 : a;
  limit /= g;
  const std::uint64_t mult = scale / g;
  if (limit == 0) return Status::InvalidArgument("rate '" + std::string(text) + "' must be > 0");
  if (static_cast<std::uint64_t>(w) > static_cast<std::uint64_t>(INT64_MAX) / mult) {
    return Status::InvalidArgument("rate '" + std::string(text) + "' is out of range");
  }
  return Rate{limit, w * static_cast<Micros>(mult)};
}

}  // namespace sluice
