// The scripts' state layouts, read and written for the module (state.h). Each rule
// names the Lua it mirrors (src/redis/lua/<algorithm>.lua, word_state.lua).
#include "redis/module/state.h"

#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace sluice::redis_module {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the layouts are little-endian doubles, read and written in place");

constexpr double k2p20 = 1048576.0, k2p19 = 524288.0, k2p21 = 2097152.0, k2p32 = 4294967296.0;
constexpr double k2p52 = 4503599627370496.0, k2p53 = 9007199254740992.0;
// Fields beyond this are not anything sluice writes (a foreign or damaged value): the
// state is then taken as absent rather than cast out of range.
constexpr double kMaxField = 4611686018427387904.0;  // 2^62

// Lua's a % b: a - floor(a / b) * b.
double LuaMod(double a, double b) {
  return a - std::floor(a / b) * b;
}

bool Field(double v) {
  return std::isfinite(v) && std::fabs(v) <= kMaxField;
}
bool Count(double v) {
  return Field(v) && v >= 0;
}

// The little-endian doubles after the algorithm's id byte.
void Unpack(std::string_view b, double* f, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) std::memcpy(&f[i], b.data() + 1 + 8 * i, 8);
}

StateBytes Pack(int alg, const double* f, std::size_t n) {
  StateBytes out;
  out.size = static_cast<std::uint8_t>(1 + 8 * n);
  out.data[0] = static_cast<char>(alg);
  for (std::size_t i = 0; i < n; ++i) std::memcpy(out.data + 1 + 8 * i, &f[i], 8);
  return out;
}

// The state's own fields in each algorithm's packed layout, after its id and expires
// (word_state.lua's WORD; GCRA's is its older '<Bdd'); a recorded layout adds three.
std::size_t PackedFields(Algorithm a) {
  switch (a) {
    case Algorithm::kSlidingWindowCounter:
      return 3;
    case Algorithm::kGcra:
      return 1;
    default:
      return 2;
  }
}

// Sets the WordState of `a` from the fields after `expires`; false when one is out of
// range.
bool Fields(Algorithm a, const double* f, core::WordState* s) {
  switch (a) {
    case Algorithm::kFixedWindow:
      if (!Field(f[0]) || !Count(f[1])) return false;
      s->fixed = {static_cast<Micros>(f[0]), static_cast<std::uint64_t>(f[1])};
      return true;
    case Algorithm::kSlidingWindowCounter:
      if (!Field(f[0]) || !Count(f[1]) || !Count(f[2])) return false;
      s->counter = {static_cast<Micros>(f[0]), static_cast<std::uint64_t>(f[1]),
                    static_cast<std::uint64_t>(f[2])};
      return true;
    case Algorithm::kTokenBucket:
      if (!Field(f[0]) || !Field(f[1])) return false;
      s->bucket = {f[0], static_cast<Micros>(f[1])};
      return true;
    default:
      if (!Field(f[0])) return false;
      s->gcra = {f[0]};
      return true;
  }
}

// False for a token bucket deeper in debt than its refill could ever reach in range of
// a clock (2^53 us to refill, where a policy refills in at most 366 days and waits at
// most a window): not a state sluice writes, and core's refill time would overflow.
bool BucketInRange(const Policy& p, const core::WordState& s) {
  if (p.algorithm != Algorithm::kTokenBucket) return true;
  const double rate = static_cast<double>(p.limit) / static_cast<double>(p.window);
  return (static_cast<double>(p.Capacity()) - s.bucket.tokens) / rate <= k2p53;
}

// fixed_window.lua's counter: the count of the window at ws = floor(now / w) * w or of
// a later one (the clock went back); false for an earlier window.
bool ReadCounter(const Policy& p, double n, Micros now, core::FixedWindowState* s,
                 Micros* expires) {
  const double w = static_cast<double>(p.window);
  const double ws = static_cast<double>(core::FloorTo(now, p.window));
  const double tag = k2p20 + LuaMod(ws / w, k2p20);
  const double otag = std::floor(n / k2p32);
  const double d = LuaMod(otag - tag, k2p20);
  if (otag < k2p20 || otag >= k2p21 || d >= k2p19) return false;
  s->window_start = static_cast<Micros>(ws + d * w);
  s->count = static_cast<std::uint64_t>(n - otag * k2p32);
  *expires = s->window_start + p.window;
  return true;
}

}  // namespace

bool LuaNumber(std::string_view bytes, double* out) {
  // The common case first: a plain decimal number (a counter, a TAT), which from_chars
  // rounds correctly, as strtod does, without strtod's multi-precision path.
  double fast = 0;
  const char* last = bytes.data() + bytes.size();
  const auto r = std::from_chars(bytes.data(), last, fast);
  if (r.ec == std::errc() && r.ptr == last && std::isfinite(fast)) {
    *out = fast;
    return true;
  }
  char buf[72];
  if (bytes.empty() || bytes.size() >= sizeof(buf)) return false;
  std::memcpy(buf, bytes.data(), bytes.size());
  buf[bytes.size()] = '\0';
  char* end = nullptr;
  double v = std::strtod(buf, &end);
  if (end == buf) return false;
  if (*end == 'x' || *end == 'X') v = static_cast<double>(std::strtoul(buf, &end, 16));
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0') return false;
  *out = v;
  return true;
}

bool WholeNumber(double v) {
  return std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= k2p53;
}

ReadState Read(const Policy& p, const StoredValue& v, Micros now) {
  ReadState r;
  if (!v.present) return r;
  const std::string_view b = v.bytes;
  const Algorithm a = p.algorithm;
  const double t = static_cast<double>(now);
  double n = 0;
  const bool number = LuaNumber(b, &n);
  if (a == Algorithm::kFixedWindow && number && n >= k2p52) {
    r.layout = Layout::kCounter;
    r.live = Count(n) && ReadCounter(p, n, now, &r.word.fixed, &r.expires);
    return r;
  }
  if (a == Algorithm::kGcra && number) {
    // gcra.lua: back to full once ceil(tat) <= now
    r.layout = Layout::kNumber;
    r.live = Field(n) && std::ceil(n) > t;
    r.word.gcra.tat = n;
    if (r.live) r.expires = static_cast<Micros>(std::ceil(n));
    return r;
  }
  const std::size_t k = PackedFields(a);
  const bool packed = b.size() == 1 + 8 * (1 + k);
  const bool recorded = b.size() == 1 + 8 * (1 + k) + 24;
  if ((!packed && !recorded) || static_cast<unsigned char>(b[0]) != static_cast<unsigned>(a)) {
    return r;
  }
  double f[8];
  Unpack(b, f, (b.size() - 1) / 8);
  r.layout = packed ? Layout::kPacked : Layout::kRecorded;
  if (!Field(f[0]) || !Fields(a, f + 1, &r.word) || !BucketInRange(p, r.word)) return ReadState{};
  r.live = f[0] > t;
  r.expires = static_cast<Micros>(f[0]);
  if (recorded) {
    r.under = core::WrittenUnder{f[1 + k], f[2 + k], f[3 + k]};
    r.same_params = core::SameParams(p, r.under);
  }
  return r;
}

bool FixedWindowLean(const Policy& p, long long pad_ms) {
  return p.on_change == OnChange::kAsIs && p.limit < 2147483648ULL &&
         static_cast<double>(p.window) * k2p19 > static_cast<double>(pad_ms + 1) * 1000.0;
}

StateBytes Encode(const Policy& p, const core::WordState& s, Micros expires, Layout layout) {
  StateBytes out;
  const Algorithm a = p.algorithm;
  const int alg = static_cast<int>(a);
  if (a == Algorithm::kFixedWindow && layout == Layout::kCounter) {
    const double w = static_cast<double>(p.window);
    const double tag = k2p20 + LuaMod(static_cast<double>(s.fixed.window_start) / w, k2p20);
    const long long v = static_cast<long long>(tag * k2p32) + static_cast<long long>(s.fixed.count);
    const auto r = std::to_chars(out.data, out.data + sizeof(out.data), v);
    out.size = static_cast<std::uint8_t>(r.ptr - out.data);
    return out;
  }
  if (a == Algorithm::kGcra && layout != Layout::kRecorded) {
    // The shortest digits that read back exactly (tonumber and strtod give the same
    // double as from the scripts' "%.17g"), without snprintf's cost.
    const auto r = std::to_chars(out.data, out.data + sizeof(out.data), s.gcra.tat);
    out.size = static_cast<std::uint8_t>(r.ptr - out.data);
    return out;
  }
  double f[8];
  std::size_t n = 0;
  f[n++] = static_cast<double>(expires);
  switch (a) {
    case Algorithm::kFixedWindow:
      f[n++] = static_cast<double>(s.fixed.window_start);
      f[n++] = static_cast<double>(s.fixed.count);
      break;
    case Algorithm::kSlidingWindowCounter:
      f[n++] = static_cast<double>(s.counter.window_start);
      f[n++] = static_cast<double>(s.counter.curr);
      f[n++] = static_cast<double>(s.counter.prev);
      break;
    case Algorithm::kTokenBucket:
      f[n++] = s.bucket.tokens;
      f[n++] = static_cast<double>(s.bucket.last);
      break;
    default:
      f[n++] = s.gcra.tat;
      break;
  }
  if (layout == Layout::kRecorded) {
    const core::WrittenUnder w = core::ParamsOf(p);
    f[n++] = w.limit;
    f[n++] = w.window;
    f[n++] = w.cap;
  }
  return Pack(alg, f, n);
}

}  // namespace sluice::redis_module
