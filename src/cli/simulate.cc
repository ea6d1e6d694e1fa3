// Traffic patterns, trace parsing and the replay through the five algorithms.
#include "cli/simulate.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <istream>
#include <memory>
#include <unordered_map>

#include "sluice/key.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice::cli {
namespace {

// splitmix64: a tiny generator whose output is fixed by its seed on every platform
// (std:: distributions are not specified bit for bit, so they are not used).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Exponentially distributed with mean 1/rate.
  double Exponential(double rate) { return -std::log(Uniform()) / rate; }

 private:
  std::uint64_t s_;
};

// One independent stream per (seed, pattern, key), so a key's traffic does not depend
// on how many other keys there are.
Rng StreamFor(std::uint64_t seed, std::uint64_t salt, std::uint64_t key) {
  Rng mix(seed ^ (salt * 0xd1b54a32d192ed03ULL));
  const std::uint64_t a = mix.Next();
  Rng mix2(a ^ (key * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
  return Rng(mix2.Next());
}

// Appends Poisson arrivals at `rate` (per microsecond) over [from, to).
void PoissonArrivals(Rng& rng, double rate, Micros from, Micros to, std::uint32_t key,
                     std::vector<Request>& out) {
  if (rate <= 0 || from >= to) return;
  double offset = rng.Exponential(rate);
  const double span = static_cast<double>(to - from);
  while (offset < span) {
    out.push_back(Request{from + static_cast<Micros>(std::floor(offset)), key, 0, 1});
    offset += rng.Exponential(rate);
  }
}

void SortByTime(std::vector<Request>& r) {
  std::stable_sort(r.begin(), r.end(),
                   [](const Request& a, const Request& b) { return a.t < b.t; });
}

std::vector<std::string> KeyNames(std::uint32_t n) {
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back("user:" + std::to_string(i + 1));
  return keys;
}

std::string FormatLoad(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string KeysText(std::size_t n) {
  return n == 1 ? "one key" : std::to_string(n) + " keys";
}

// "12:00:59" (UTC time of day; with milliseconds when they are not zero).
std::string ClockTime(Micros t) {
  const Micros s = ((t / kSec) % 86400 + 86400) % 86400;
  char buf[32];
  const int ms = static_cast<int>(t % kSec / 1000);
  if (ms != 0) {
    std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60 % 60), static_cast<int>(s % 60), ms);
  } else {
    std::snprintf(buf, sizeof buf, "%02d:%02d:%02d", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60 % 60), static_cast<int>(s % 60));
  }
  return buf;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Seconds with up to 6 decimals -> microseconds, exactly (no floating point).
bool ParseSeconds(std::string_view s, Micros* out) {
  std::size_t i = 0;
  std::int64_t whole = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    // 10^11 s (~3,170 years) at most, so that whole * 10^6 + frac fits in int64
    // (a larger bound overflowed: found by tests/fuzz/trace_fuzz.cc).
    if (whole >= 100'000'000'000LL) return false;
    whole = whole * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  std::int64_t frac = 0;
  int digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (digits == 6) return false;
      frac = frac * 10 + (s[i] - '0');
      ++digits;
      ++i;
    }
  }
  if (i != s.size()) return false;
  for (; digits < 6; ++digits) frac *= 10;
  *out = whole * kSec + frac;
  return true;
}

bool ParseCost(std::string_view s, std::uint64_t* out) {
  if (s.empty() || s.size() > 13) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v == 0) return false;
  *out = v;
  return true;
}

// The exact rule's view of one key: what the algorithm under test admitted within
// the trailing window.
struct Reference {
  std::vector<std::pair<Micros, std::uint64_t>> entries;
  std::size_t head = 0;
  std::uint64_t sum = 0;
  bool active = false;

  // Drops entries that can no longer count at time t (the log's rule: t - ts < W).
  void Prune(Micros t, Micros window) {
    while (head < entries.size() && entries[head].first <= t - window) {
      sum -= entries[head].second;
      ++head;
    }
    if (head == entries.size()) {
      entries.clear();
      head = 0;
    } else if (head > 64 && head * 2 > entries.size()) {
      entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
  }
  void Add(Micros t, std::uint64_t cost) {
    entries.emplace_back(t, cost);
    sum += cost;
  }
};

}  // namespace

std::vector<Policy> SimPolicies(const SimPolicy& p) {
  const std::chrono::microseconds w(p.window);
  const std::uint64_t burst = p.burst == 0 ? p.limit : p.burst;
  return {Policy::FixedWindow("fixed_window", p.limit, w),
          Policy::SlidingWindowLog("sliding_window_log", p.limit, w),
          Policy::SlidingWindowCounter("sliding_window_counter", p.limit, w),
          Policy::TokenBucket("token_bucket", burst, p.limit, w),
          Policy::Gcra("gcra", p.limit, w, burst)};
}

Traffic BoundaryBurst(const SimPolicy& p) {
  const Micros w = p.window;
  const Micros minute = kSimStart + 60 * kSec;  // 12:01:00
  const Micros boundary = (minute + w - 1) / w * w;
  const Micros gap = std::min<Micros>(kSec, w / 2);
  const Micros spacing =
      std::min<Micros>(1000, gap / static_cast<Micros>(std::max<std::uint64_t>(p.limit, 1)));
  Traffic t;
  t.id = "boundary";
  const std::string n = std::to_string(p.limit);
  t.title = "boundary burst: " + n + " requests at " + ClockTime(boundary - gap) + ", " + n +
            " at " + ClockTime(boundary) + " (a window boundary), one key";
  t.keys = {"user:1"};
  for (std::uint64_t i = 0; i < p.limit; ++i) {
    t.requests.push_back({boundary - gap + static_cast<Micros>(i) * spacing, 0, 0, 1});
  }
  for (std::uint64_t i = 0; i < p.limit; ++i) {
    t.requests.push_back({boundary + static_cast<Micros>(i) * spacing, 0, 0, 1});
  }
  // Draw from half a window before to past the moment the bursts leave the window.
  t.begin = boundary - w / 2;
  t.end = boundary + w + w / 4;
  return t;
}

Traffic Poisson(const SimPolicy& p, double load, std::uint32_t keys, Micros duration,
                std::uint64_t seed) {
  Traffic t;
  t.id = "poisson-" + FormatLoad(load) + "x";
  t.title = "steady Poisson traffic at " + FormatLoad(load) + "x the limit, " + KeysText(keys) +
            ", " + FormatDuration(duration);
  t.keys = KeyNames(keys);
  const double rate = load * static_cast<double>(p.limit) / static_cast<double>(p.window);
  for (std::uint32_t k = 0; k < keys; ++k) {
    Rng rng = StreamFor(seed, 1, k);
    PoissonArrivals(rng, rate, kSimStart, kSimStart + duration, k, t.requests);
  }
  SortByTime(t.requests);
  t.begin = kSimStart;
  t.end = kSimStart + duration;
  return t;
}

Traffic OnOff(const SimPolicy& p, double on_load, Micros on, Micros off, std::uint32_t keys,
              Micros duration, std::uint64_t seed) {
  Traffic t;
  t.id = "onoff";
  t.title = "on/off bursts: " + FormatDuration(on) + " at " + FormatLoad(on_load) +
            "x the limit, then " + FormatDuration(off) + " silent, " + KeysText(keys) + ", " +
            FormatDuration(duration);
  t.keys = KeyNames(keys);
  const double rate = on_load * static_cast<double>(p.limit) / static_cast<double>(p.window);
  const Micros period = on + off;
  const Micros end = kSimStart + duration;
  for (std::uint32_t k = 0; k < keys; ++k) {
    Rng rng = StreamFor(seed, 2, k);
    const auto phase = static_cast<Micros>(rng.Uniform() * static_cast<double>(period));
    for (Micros s = kSimStart + phase - period; s < end; s += period) {
      PoissonArrivals(rng, rate, std::max(s, kSimStart), std::min(s + on, end), k, t.requests);
    }
  }
  SortByTime(t.requests);
  t.begin = kSimStart;
  t.end = end;
  return t;
}

Result<Traffic> ParseTrace(std::istream& in, std::string_view name) {
  Traffic t;
  t.id = "trace";
  t.title = "trace " + std::string(name);
  std::unordered_map<std::string, std::uint32_t> index;
  std::string line;
  std::uint32_t n = 0;
  const auto fail = [&](const std::string& what) {
    return Status::InvalidArgument(std::string(name) + ":" + std::to_string(n) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++n;
    const std::string_view s = Trim(line);
    if (s.empty() || s.front() == '#') continue;
    std::string_view fields[4];
    std::size_t count = 0;
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
      const std::size_t start = i;
      while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
      if (i > start) {
        if (count == 4) break;
        fields[count++] = s.substr(start, i - start);
      }
    }
    if (count < 2 || count > 3) {
      return fail("expected 'TIMESTAMP KEY [COST]' (e.g. '1785412859.250 user:1 1'), got " +
                  std::to_string(count > 3 ? 4 : count) + (count > 3 ? " or more" : "") +
                  (count == 1 ? " field" : " fields"));
    }
    Request r;
    r.line = n;
    if (!ParseSeconds(fields[0], &r.t)) {
      return fail("timestamp '" + std::string(fields[0]) +
                  "' is not seconds with at most 6 decimals (e.g. 1785412859.250)");
    }
    if (fields[1].size() > kMaxKeyBytes) {
      return fail("key is " + std::to_string(fields[1].size()) + " bytes; at most " +
                  std::to_string(kMaxKeyBytes) + " are allowed");
    }
    if (count == 3 && !ParseCost(fields[2], &r.cost)) {
      return fail("cost '" + std::string(fields[2]) + "' is not an integer >= 1");
    }
    auto [it, inserted] =
        index.emplace(std::string(fields[1]), static_cast<std::uint32_t>(t.keys.size()));
    if (inserted) t.keys.push_back(it->first);
    r.key = it->second;
    t.requests.push_back(r);
  }
  if (in.bad()) return Status::InvalidArgument(std::string(name) + ": read error");
  if (t.requests.empty()) {
    return Status::InvalidArgument(std::string(name) + ": no requests (expected lines of " +
                                   "'TIMESTAMP KEY [COST]')");
  }
  SortByTime(t.requests);
  t.title +=
      " (" + std::to_string(t.requests.size()) + " requests, " + KeysText(t.keys.size()) + ")";
  t.begin = t.requests.front().t;
  t.end = t.requests.back().t + 1;
  return t;
}

Result<Traffic> LoadTrace(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::InvalidArgument("cannot open trace file '" + path + "'");
  return ParseTrace(f, path);
}

Status CheckTraffic(const Traffic& traffic, const SimPolicy& p, std::string_view name) {
  std::uint64_t capacity = p.limit;
  if (p.burst != 0) capacity = std::min(capacity, p.burst);
  for (const Request& r : traffic.requests) {
    if (r.cost > capacity) {
      std::string where = std::string(name);
      if (r.line > 0) where += ":" + std::to_string(r.line);
      return Status::InvalidArgument(where + ": cost " + std::to_string(r.cost) +
                                     " is more than the limit " + std::to_string(capacity) +
                                     ", so it could never pass");
    }
  }
  return Status::Ok();
}

Result<std::vector<AlgorithmRun>> RunTraffic(const Traffic& traffic, const SimPolicy& p,
                                             const RunOptions& options) {
  std::vector<AlgorithmRun> runs;
  const std::vector<Policy> policies = SimPolicies(p);
  std::size_t bins = 0;
  if (options.bin_width > 0 && traffic.end > traffic.begin) {
    bins = static_cast<std::size_t>((traffic.end - traffic.begin + options.bin_width - 1) /
                                    options.bin_width);
  }
  const auto bin_of = [&](Micros t) -> std::size_t {
    if (t <= traffic.begin) return 0;
    return std::min(bins - 1, static_cast<std::size_t>((t - traffic.begin) / options.bin_width));
  };

  for (const Policy& policy : policies) {
    LimiterOptions o;
    o.policies = {policy};
    o.store = std::make_shared<MemoryStore>(
        MemoryStoreOptions{.max_keys = traffic.keys.size() + 1024, .shards = 16});
    auto clock = std::make_shared<ManualClock>(
        traffic.requests.empty() ? traffic.begin : traffic.requests.front().t);
    o.clock = clock;
    o.key_prefix = "sim";
    auto limiter = Limiter::Create(std::move(o));
    if (!limiter.ok()) return limiter.status();

    AlgorithmRun run;
    run.algorithm = policy.algorithm;
    run.bin_width = bins > 0 ? options.bin_width : 0;
    run.offered_per_bin.assign(bins, 0);
    run.allowed_per_bin.assign(bins, 0);
    run.window_peak_per_bin.assign(bins, 0);
    std::vector<Reference> refs(traffic.keys.size());
    std::vector<std::uint32_t> active;  // keys whose Reference may be non-empty (drawing)
    std::size_t next_bin = 0;
    // The level every key carries into bin b, so the line falls as requests age out.
    const auto open_bins_through = [&](std::size_t last) {
      for (; next_bin <= last && next_bin < bins; ++next_bin) {
        const Micros tb = traffic.begin + static_cast<Micros>(next_bin) * options.bin_width;
        std::uint64_t level = 0;
        std::size_t kept = 0;
        for (std::uint32_t k : active) {
          refs[k].Prune(tb, p.window);
          level = std::max(level, refs[k].sum);
          if (refs[k].sum > 0) {
            active[kept++] = k;
          } else {
            refs[k].active = false;
          }
        }
        active.resize(kept);
        run.window_peak_per_bin[next_bin] = std::max(run.window_peak_per_bin[next_bin], level);
      }
    };

    for (const Request& r : traffic.requests) {
      std::size_t bin = 0;
      if (bins > 0) {
        bin = bin_of(r.t);
        open_bins_through(bin);
      }
      clock->Set(r.t);
      auto d = (*limiter)->Acquire(traffic.keys[r.key], r.cost);
      if (!d.ok()) {
        std::string where = r.line > 0 ? "line " + std::to_string(r.line) + ": " : "";
        return Status(d.status().code(), where + d.status().message());
      }
      if (d->source != DecisionSource::kStore) {
        return Status::Internal("the in-process store could not decide (" +
                                std::string(DecisionSourceName(d->source)) + ")");
      }
      Reference& ref = refs[r.key];
      ref.Prune(r.t, p.window);
      const bool exact_allows = ref.sum + r.cost <= p.limit;
      if (bins > 0) ++run.offered_per_bin[bin];
      if (d->allowed) {
        ++run.allowed;
        if (!exact_allows) ++run.wrongly_allowed;
        ref.Add(r.t, r.cost);
        run.max_in_window = std::max(run.max_in_window, ref.sum);
        if (options.keep_allowed_times) run.allowed_times.push_back(r.t);
        if (bins > 0) {
          ++run.allowed_per_bin[bin];
          run.window_peak_per_bin[bin] = std::max(run.window_peak_per_bin[bin], ref.sum);
          if (!ref.active) {
            ref.active = true;
            active.push_back(r.key);
          }
        }
      } else {
        ++run.denied;
        if (exact_allows) ++run.wrongly_denied;
      }
    }
    if (bins > 0) open_bins_through(bins - 1);
    runs.push_back(std::move(run));
  }
  return runs;
}

Micros NiceBinWidth(Micros range, std::size_t max_bins) {
  static constexpr Micros kNice[] = {
      1,          2,           5,           10,          20,           50,           100,
      200,        500,         1'000,       2'000,       5'000,        10'000,       20'000,
      50'000,     100'000,     250'000,     500'000,     1 * kSec,     2 * kSec,     5 * kSec,
      10 * kSec,  15 * kSec,   30 * kSec,   60 * kSec,   120 * kSec,   300 * kSec,   600 * kSec,
      900 * kSec, 1800 * kSec, 3600 * kSec, 7200 * kSec, 21600 * kSec, 43200 * kSec, 86400 * kSec};
  const auto bins = static_cast<Micros>(std::max<std::size_t>(max_bins, 1));
  for (Micros w : kNice) {
    if ((range + w - 1) / w <= bins) return w;
  }
  return (range + bins - 1) / bins;
}

std::string FormatDuration(Micros d) {
  if (d <= 0) return "0s";
  std::string out;
  if (d % kSec != 0) {
    char buf[48];
    if (d < 1000) {
      std::snprintf(buf, sizeof buf, "%" PRId64 "us", d);
    } else if (d < kSec) {
      std::snprintf(buf, sizeof buf, "%gms", static_cast<double>(d) / 1000.0);
    } else {
      std::snprintf(buf, sizeof buf, "%gs", static_cast<double>(d) / 1e6);
    }
    return buf;
  }
  Micros s = d / kSec;
  const Micros days = s / 86400;
  s %= 86400;
  const Micros h = s / 3600;
  s %= 3600;
  const Micros m = s / 60;
  s %= 60;
  if (days) out += std::to_string(days) + "d";
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s) out += std::to_string(s) + "s";
  return out;
}

std::string FormatTable(const Traffic& traffic, const SimPolicy& p,
                        const std::vector<AlgorithmRun>& runs) {
  const std::string w = FormatDuration(p.window);
  const std::uint64_t burst = p.burst == 0 ? p.limit : p.burst;
  std::string out;
  out += traffic.title + "\n";
  out += "limit " + std::to_string(p.limit) + " per " + w + " (token_bucket, gcra: burst " +
         std::to_string(burst) + ", refill " + std::to_string(p.limit) + " per " + w + "); " +
         std::to_string(traffic.requests.size()) + " requests\n\n";
  const std::string max_head = "max in " + w + " window";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-24s %9s %9s %*s %16s %15s %9s\n", "algorithm", "allowed",
                "denied", static_cast<int>(std::max<std::size_t>(max_head.size(), 11)),
                max_head.c_str(), "wrongly allowed", "wrongly denied", "wrong");
  out += buf;
  const double total = static_cast<double>(std::max<std::size_t>(traffic.requests.size(), 1));
  for (const AlgorithmRun& r : runs) {
    const std::string max_text = std::to_string(r.max_in_window) + " / " + std::to_string(p.limit);
    const double wrong = 100.0 * static_cast<double>(r.wrongly_allowed + r.wrongly_denied) / total;
    std::snprintf(buf, sizeof buf,
                  "  %-24s %9" PRIu64 " %9" PRIu64 " %*s %16" PRIu64 " %15" PRIu64 " %8.4f%%\n",
                  AlgorithmName(r.algorithm), r.allowed, r.denied,
                  static_cast<int>(std::max<std::size_t>(max_head.size(), 11)), max_text.c_str(),
                  r.wrongly_allowed, r.wrongly_denied, wrong);
    out += buf;
  }
  return out;
}

}  // namespace sluice::cli
