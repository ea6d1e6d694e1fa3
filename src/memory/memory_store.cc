// MemoryStore: sharded open-addressing hash tables of 64-byte slots.
//
// A slot (one cache line) holds the key (inline up to 30 bytes, else on the heap),
// the algorithm's state (a few words; a pointer to a ring buffer for the sliding log)
// and the time at which that state is back to "full". Lookups of existing keys
// allocate nothing and, for inline keys, read one cache line of the table. Linear
// probing with backward-shift deletion (no tombstones); tables grow by 1.5x at 7/8
// load, so memory per key stays between 64/0.875 and 64/0.58 bytes.
//
// A Limiter's store key is "<prefix>:{<escaped caller key>}:<policy>": with the
// default prefix "sluice", 10 bytes + the policy name + the caller key. Keys longer
// than 30 bytes cost a heap block more, and a second cache miss per decision.
#include "sluice/memory_store.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "core/algorithms.h"
#include "memory/memory_store_internal.h"

namespace sluice {

namespace memory_internal {

namespace {

std::uint64_t Load64(const char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
std::uint64_t Load32(const char* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}
// 64x64 -> 128-bit multiply, folded: the mixing step of wyhash.
std::uint64_t Mum(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

}  // namespace

std::uint64_t HashKey(std::string_view k) {
  // wyhash's structure: 16 bytes per multiply, the last 16 bytes (overlapping) and
  // the length folded in at the end. A 29-byte Limiter key takes three dependent
  // multiplies instead of the four rounds and finaliser of FNV-over-words before.
  constexpr std::uint64_t kS0 = 0xa0761d6478bd642fULL;
  constexpr std::uint64_t kS1 = 0xe7037ed1a0b428dbULL;
  constexpr std::uint64_t kS2 = 0x8ebc6af09c88c6e3ULL;
  const char* p = k.data();
  const std::size_t n = k.size();
  std::uint64_t seed = kS0 ^ n;
  std::uint64_t a = 0, b = 0;
  if (n <= 16) {
    if (n >= 8) {
      a = Load64(p);
      b = Load64(p + n - 8);
    } else if (n >= 4) {
      a = Load32(p);
      b = Load32(p + n - 4);
    } else if (n > 0) {
      const auto u = [p](std::size_t i) { return std::uint64_t{static_cast<unsigned char>(p[i])}; };
      a = (u(0) << 16) | (u(n >> 1) << 8) | u(n - 1);
    }
  } else {
    for (std::size_t i = 0; i + 16 < n; i += 16) {
      seed = Mum(Load64(p + i) ^ kS1, Load64(p + i + 8) ^ seed);
    }
    a = Load64(p + n - 16);
    b = Load64(p + n - 8);
  }
  return Mum(kS2 ^ n, Mum(a ^ kS1, b ^ seed)) | 1;  // 0 marks an empty slot
}

}  // namespace memory_internal

namespace {

constexpr std::size_t kInlineKey = 30;
constexpr std::uint8_t kHeapKey = 0xFF;

using memory_internal::HashKey;

constexpr std::uint8_t TagOf(Algorithm a) {
  return static_cast<std::uint8_t>(static_cast<std::uint8_t>(a) + 1);
}

// --- carry-over (Policy::on_change; issue #12 item 4) ---
// A slot written by a policy whose on_change is not kAsIs records the parameters it was
// written under: the tag has kCarryTag set, and the state holds the id of the
// parameters in the store's ParamsRegistry (CarryId/SetCarryId below). Such slots never
// take the one-check fast path (its tag test fails), so the common path is unchanged.
constexpr std::uint8_t kCarryTag = 0x80;
// Ids are 24 bits (a sliding counter keeps its id in the top bits of `prev`, whose
// counts stay below 2^40 > 10^12, the largest limit).
constexpr std::uint32_t kMaxCarryId = (1u << 24) - 1;
constexpr int kCounterIdShift = 40;
constexpr std::uint64_t kCounterMask = (std::uint64_t{1} << kCounterIdShift) - 1;

// A growable ring buffer of log entries, allocated with malloc so the slot can hold a
// bare pointer. Capacity doubles up to the policy's limit.
struct LogBuffer {
  Micros last_seen;
  std::uint64_t used;
  std::uint32_t head;
  std::uint32_t count;
  std::uint32_t capacity;
  core::LogEntry entries[1];

  static LogBuffer* Make(std::uint32_t capacity) {
    void* mem = std::malloc(sizeof(LogBuffer) + sizeof(core::LogEntry) * (capacity - 1));
    if (mem == nullptr) throw std::bad_alloc();
    return Init(static_cast<LogBuffer*>(mem), capacity);
  }
  static LogBuffer* Init(LogBuffer* b, std::uint32_t capacity) {
    b->last_seen = std::numeric_limits<Micros>::min();
    b->used = 0;
    b->head = 0;
    b->count = 0;
    b->capacity = capacity;
    return b;
  }
};

class RingLog final : public core::SlidingLog {
 public:
  RingLog(LogBuffer** buf, std::uint64_t limit) : buf_(buf), limit_(limit) {}
  Micros last_seen() const override { return (*buf_)->last_seen; }
  void set_last_seen(Micros t) override { (*buf_)->last_seen = t; }
  std::size_t size() const override { return (*buf_)->count; }
  const core::LogEntry& at(std::size_t i) const override {
    const LogBuffer* b = *buf_;
    return b->entries[(b->head + i) % b->capacity];
  }
  void pop_front() override {
    LogBuffer* b = *buf_;
    b->used -= b->entries[b->head].cost;
    b->head = (b->head + 1) % b->capacity;
    --b->count;
  }
  void pop_back() override {
    LogBuffer* b = *buf_;
    --b->count;
    b->used -= b->entries[(b->head + b->count) % b->capacity].cost;
  }
  void push_back(core::LogEntry e) override {
    LogBuffer* b = *buf_;
    if (b->count == b->capacity) {
      // Up to the limit; beyond it only for penalties, which may take a log to twice
      // its limit (core::SlidingWindowLogPenalize).
      const std::uint64_t bound = b->capacity < limit_ ? limit_ : 2 * limit_;
      const auto cap = static_cast<std::uint32_t>(std::min<std::uint64_t>(
          bound, std::max<std::uint64_t>(4, std::uint64_t{b->capacity} * 2)));
      LogBuffer* n = LogBuffer::Make(cap);
      n->last_seen = b->last_seen;
      n->used = b->used;
      for (std::uint32_t i = 0; i < b->count; ++i) {
        n->entries[i] = b->entries[(b->head + i) % b->capacity];
      }
      n->count = b->count;
      std::free(b);
      *buf_ = b = n;
    }
    b->entries[(b->head + b->count) % b->capacity] = e;
    ++b->count;
    b->used += e.cost;
  }
  std::uint64_t used() const override { return (*buf_)->used; }

 private:
  LogBuffer** buf_;
  std::uint64_t limit_;
};

// --- concurrency limits (issue #12 item 1) ---
// The permits of one key, a ring ordered by expiry (LogBuffer's pattern: malloc'd, so
// the slot holds a bare pointer). Capacity doubles up to the policy's max_in_flight
// (beyond only for permits taken under a larger limit of the same policy name).
struct PermitBuffer {
  std::uint32_t head;
  std::uint32_t count;
  std::uint32_t capacity;
  core::PermitEntry entries[1];

  static PermitBuffer* Make(std::uint32_t capacity) {
    void* mem = std::malloc(sizeof(PermitBuffer) + sizeof(core::PermitEntry) * (capacity - 1));
    if (mem == nullptr) throw std::bad_alloc();
    return Init(static_cast<PermitBuffer*>(mem), capacity);
  }
  static PermitBuffer* Init(PermitBuffer* b, std::uint32_t capacity) {
    b->head = 0;
    b->count = 0;
    b->capacity = capacity;
    return b;
  }
};

class RingPermits final : public core::PermitSet {
 public:
  RingPermits(PermitBuffer** buf, std::uint64_t limit) : buf_(buf), limit_(limit) {}
  std::size_t size() const override { return (*buf_)->count; }
  const core::PermitEntry& at(std::size_t i) const override {
    const PermitBuffer* b = *buf_;
    return b->entries[(b->head + i) % b->capacity];
  }
  void pop_front() override {
    PermitBuffer* b = *buf_;
    b->head = (b->head + 1) % b->capacity;
    --b->count;
  }
  void erase(std::size_t i) override {
    PermitBuffer* b = *buf_;
    for (std::size_t j = i; j + 1 < b->count; ++j) {
      b->entries[(b->head + j) % b->capacity] = b->entries[(b->head + j + 1) % b->capacity];
    }
    --b->count;
  }
  void push_back(core::PermitEntry e) override {
    PermitBuffer* b = *buf_;
    if (b->count == b->capacity) {
      const auto cap = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(std::max<std::uint64_t>(limit_, b->capacity + 1),
                                  std::max<std::uint64_t>(4, std::uint64_t{b->capacity} * 2)));
      PermitBuffer* n = PermitBuffer::Make(cap);
      for (std::uint32_t i = 0; i < b->count; ++i) {
        n->entries[i] = b->entries[(b->head + i) % b->capacity];
      }
      n->count = b->count;
      std::free(b);
      *buf_ = b = n;
    }
    b->entries[(b->head + b->count) % b->capacity] = e;
    ++b->count;
  }

 private:
  PermitBuffer** buf_;
  std::uint64_t limit_;
};

union State {
  State() : counter{} {}
  core::FixedWindowState fixed;
  core::SlidingCounterState counter;
  core::TokenBucketState bucket;
  core::GcraState gcra;
  LogBuffer* log;
  PermitBuffer* permits;  // concurrency limits
};
static_assert(sizeof(State) == 24);
static_assert(sizeof(core::FixedWindowState) <= 16 && sizeof(core::TokenBucketState) <= 16 &&
              sizeof(core::GcraState) <= 16);

// The parameters id a carry slot's state holds (bytes 16-19 of the state for fixed
// window, token bucket and GCRA, the top 24 bits of `prev` for a sliding counter).
std::uint32_t CarryId(Algorithm a, const State& st) {
  if (a == Algorithm::kSlidingWindowCounter) {
    return static_cast<std::uint32_t>(st.counter.prev >> kCounterIdShift);
  }
  std::uint32_t id;
  std::memcpy(&id, reinterpret_cast<const char*>(&st) + 16, sizeof(id));
  return id;
}
void SetCarryId(Algorithm a, State& st, std::uint32_t id) {
  if (a == Algorithm::kSlidingWindowCounter) {
    st.counter.prev = (st.counter.prev & kCounterMask) | (std::uint64_t{id} << kCounterIdShift);
    return;
  }
  std::memcpy(reinterpret_cast<char*>(&st) + 16, &id, sizeof(id));
}
// The state without its id, as the algorithms read it.
State CleanState(Algorithm a, const State& st) {
  State out = st;
  if (a == Algorithm::kSlidingWindowCounter) out.counter.prev &= kCounterMask;
  return out;
}

// A key longer than kInlineKey: its bytes live on the heap; its hash is kept in the
// slot so that probing past it, or moving it, never touches the heap.
struct HeapKey {
  char* data;
  std::uint32_t len;
  std::uint64_t hash;
};
static_assert(sizeof(HeapKey) <= kInlineKey);

// One cache line: a probe reads exactly one line.
struct alignas(64) Slot {
  Micros expires;
  State state;
  // The key's bytes, or a HeapKey. At an 8-byte offset, so that a HeapKey's pointer is
  // an aligned word: LeakSanitizer (which scans aligned words) then sees the heap key
  // as reachable instead of leaked.
  char key[kInlineKey];
  std::uint8_t tag;      // 0: empty; else TagOf(the algorithm `state` belongs to)
  std::uint8_t key_len;  // <= kInlineKey, or kHeapKey

  bool empty() const { return tag == 0; }
  HeapKey Heap() const {
    HeapKey h;
    std::memcpy(&h, key, sizeof(h));
    return h;
  }
  bool Matches(std::uint64_t hash, std::string_view k) const {
    if (key_len != kHeapKey) {
      return key_len == k.size() && std::memcmp(key, k.data(), k.size()) == 0;
    }
    const HeapKey h = Heap();
    return h.hash == hash && h.len == k.size() && std::memcmp(h.data, k.data(), k.size()) == 0;
  }
  std::uint64_t Hash() const {
    return key_len != kHeapKey ? HashKey(std::string_view(key, key_len)) : Heap().hash;
  }
  void SetKey(std::uint64_t hash, std::string_view k) {
    if (k.size() <= kInlineKey) {
      key_len = static_cast<std::uint8_t>(k.size());
      std::memcpy(key, k.data(), k.size());
      return;
    }
    HeapKey h{static_cast<char*>(std::malloc(k.size())), static_cast<std::uint32_t>(k.size()),
              hash};
    if (h.data == nullptr) throw std::bad_alloc();
    std::memcpy(h.data, k.data(), k.size());
    key_len = kHeapKey;
    std::memcpy(key, &h, sizeof(h));
  }
  void Free() {
    if (key_len == kHeapKey) std::free(Heap().data);
    if ((tag & ~kCarryTag) == TagOf(Algorithm::kSlidingWindowLog) && state.log) {
      std::free(state.log);
    }
    if (tag == TagOf(Algorithm::kConcurrency) && state.permits) std::free(state.permits);
    tag = 0;
  }
};
static_assert(sizeof(Slot) == 64);
static_assert(offsetof(Slot, key) % alignof(char*) == 0);

// A table's slots, zeroed (every slot empty). Arrays of 2 MiB or more start on a 2 MiB
// boundary and ask for transparent huge pages over their whole 2 MiB pages: a decision
// on a random key of a big table then needs no page walk (with 4 KiB pages, 1M keys
// span ~24,000 pages, far more than the TLB holds, and each miss walks the page
// tables before the slot's own cache miss). The memory comes from malloc so that
// LeakSanitizer still scans it for the heap keys it points to.
class SlotArray {
 public:
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  SlotArray() = default;
  explicit SlotArray(std::size_t n) : n_(n) {
    const std::size_t bytes = n * sizeof(Slot);
    void* p = bytes >= kHugePage ? std::aligned_alloc(kHugePage, RoundUp(bytes, kHugePage))
                                 : std::aligned_alloc(alignof(Slot), bytes);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (bytes >= kHugePage) (void)::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
    std::memset(p, 0, bytes);
    p_ = static_cast<Slot*>(p);
  }
  ~SlotArray() {
    std::free(p_);
  }
  SlotArray(const SlotArray&) = delete;
  SlotArray& operator=(const SlotArray&) = delete;
  void swap(SlotArray& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }

  std::size_t size() const {
    return n_;
  }
  bool empty() const {
    return n_ == 0;
  }
  Slot* data() {
    return p_;
  }
  Slot& operator[](std::size_t i) {
    return p_[i];
  }
  Slot* begin() {
    return p_;
  }
  Slot* end() {
    return p_ + n_;
  }

 private:
  static std::size_t RoundUp(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
  }
  Slot* p_ = nullptr;
  std::size_t n_ = 0;
};

class Table {
 public:
  ~Table() {
    for (Slot& s : slots_) {
      if (!s.empty()) s.Free();
    }
  }

  std::size_t size() const { return size_; }

  // Starts loading the home slot of `hash` into the cache. Called without the lock:
  // it reads the array's address and size from copies kept for it (they may be stale
  // by a concurrent Grow; a prefetch of a stale address loads nothing useful but
  // never faults).
  void Prefetch(std::uint64_t hash) const {
    const std::size_t n = prefetch_size_.load(std::memory_order_relaxed);
    if (n != 0) {
      __builtin_prefetch(prefetch_base_.load(std::memory_order_relaxed) +
                         memory_internal::HomeSlot(hash, n));
    }
  }

  Slot* Find(std::uint64_t hash, std::string_view key) {
    if (slots_.empty()) return nullptr;
    for (std::size_t i = Home(hash);; i = Next(i)) {
      Slot& s = slots_[i];
      if (s.empty()) return nullptr;
      if (s.Matches(hash, key)) return &s;
    }
  }

  // Inserts a key that is known to be absent, for `algorithm`; returns its slot (key
  // and tag set, state zeroed).
  Slot* Insert(std::uint64_t hash, std::string_view key, Algorithm algorithm) {
    if ((size_ + 1) * 8 > slots_.size() * 7) Grow();
    std::size_t i = Home(hash);
    while (!slots_[i].empty()) i = Next(i);
    Slot& s = slots_[i];
    s.SetKey(hash, key);
    s.tag = TagOf(algorithm);
    s.state = State{};
    s.expires = 0;
    ++size_;
    return &s;
  }

  // Removes every slot whose state is back to full at `now`; returns how many.
  std::size_t Sweep(Micros now) {
    std::size_t removed = 0;
    Micros next = std::numeric_limits<Micros>::max();
    for (std::size_t i = 0; i < slots_.size();) {
      Slot& s = slots_[i];
      if (!s.empty() && s.expires <= now) {
        Erase(i);
        ++removed;
        continue;  // re-examine the slot a later entry was shifted into
      }
      if (!s.empty()) next = std::min(next, s.expires);
      ++i;
    }
    next_expiry_ = next;
    return removed;
  }

  // Cheap incremental sweep of a few slots after the last visited one.
  std::size_t SweepSome(Micros now, int n) {
    std::size_t removed = 0;
    if (slots_.empty()) return 0;
    for (int k = 0; k < n; ++k) {
      hand_ = hand_ + 1 >= slots_.size() ? 0 : hand_ + 1;
      Slot& s = slots_[hand_];
      if (!s.empty() && s.expires <= now) {
        Erase(hand_);
        ++removed;
      }
    }
    return removed;
  }

  // The earliest time at which a full Sweep could remove anything.
  Micros next_expiry() const { return next_expiry_; }
  // Writes only when the minimum moves, so that the line stays clean (and shared
  // between cores) on the decision path.
  void NoteExpiry(Micros t) {
    if (t < next_expiry_) next_expiry_ = t;
  }

  void EraseSlot(Slot* s) { Erase(static_cast<std::size_t>(s - slots_.data())); }

 private:
  std::size_t Home(std::uint64_t hash) const {
    return memory_internal::HomeSlot(hash, slots_.size());
  }
  std::size_t Next(std::size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  void Erase(std::size_t i) {
    slots_[i].Free();
    --size_;
    // Backward shift: pull later entries of the cluster into the hole when their home
    // position allows it.
    std::size_t hole = i;
    for (std::size_t j = Next(i);; j = Next(j)) {
      Slot& s = slots_[j];
      if (s.empty()) break;
      const std::size_t home = Home(s.Hash());
      // Can s move to `hole`? Only if hole lies cyclically in [home, j).
      const bool movable = (hole <= j) ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        std::memcpy(static_cast<void*>(&slots_[hole]), &s, sizeof(Slot));
        s.tag = 0;  // moved, not freed
        hole = j;
      }
    }
  }

  void Grow() {
    std::size_t cap = std::max<std::size_t>(16, slots_.size() + slots_.size() / 2);
    // A table of a huge page or more fills its last huge page: it then lives wholly
    // in huge pages, and the extra slots shorten probe sequences.
    constexpr std::size_t kPerHugePage = SlotArray::kHugePage / sizeof(Slot);
    if (cap >= kPerHugePage) cap = (cap + kPerHugePage - 1) / kPerHugePage * kPerHugePage;
    SlotArray bigger(cap);
    SlotArray old;
    old.swap(slots_);
    slots_.swap(bigger);
    prefetch_base_.store(slots_.data(), std::memory_order_relaxed);
    prefetch_size_.store(slots_.size(), std::memory_order_relaxed);
    for (Slot& s : old) {
      if (s.empty()) continue;
      std::size_t i = Home(s.Hash());
      while (!slots_[i].empty()) i = Next(i);
      std::memcpy(static_cast<void*>(&slots_[i]), &s, sizeof(Slot));
    }
    hand_ = 0;
  }

  SlotArray slots_;
  std::atomic<Slot*> prefetch_base_{nullptr};
  std::atomic<std::size_t> prefetch_size_{0};
  std::size_t size_ = 0;
  std::size_t hand_ = 0;
  Micros next_expiry_ = std::numeric_limits<Micros>::max();
};

// A shard's lock: a word that is 0 (free), 1 (held) or 2 (held, maybe with waiters).
// A thread that finds it held spins briefly before it sleeps (std::atomic::wait, a
// futex on Linux). A decision holds the lock for a few dozen nanoseconds, far less
// than a futex sleep and wake-up cost: std::mutex (glibc) sleeps at the first
// failed attempt, so two threads on one hot key spent most of their time in
// futex system calls and two threads decided fewer keys than one.
class ShardLock {
 public:
  void lock() {
    std::uint32_t c = 0;
    if (word_.compare_exchange_strong(c, 1, std::memory_order_acquire)) return;
    for (int spin = 0; spin < kSpins; ++spin) {
      Pause();
      if (word_.load(std::memory_order_relaxed) != 0) continue;
      c = 0;
      if (word_.compare_exchange_weak(c, 1, std::memory_order_acquire)) return;
    }
    while (word_.exchange(2, std::memory_order_acquire) != 0) word_.wait(2);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) == 2) word_.notify_one();
  }

 private:
  static constexpr int kSpins = 200;
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  std::atomic<std::uint32_t> word_{0};
};

// Blocks (Policy::block_for) of one shard's keys: block-until by store key. Apart from
// the slots, so that a slot stays one cache line for the many keys that are never
// blocked; a shard allocates it at its first block. Expired blocks are dropped when
// met, and all of them whenever the map has doubled since the last sweep. Each entry
// counts as a key against MemoryStoreOptions::max_keys: the functions that add or drop
// entries say how many, for the store's count.
class BlockTable {
 public:
  // Microseconds left of the block of `key` at `now`; 0 when not blocked. An expired
  // entry is dropped (*dropped = 1).
  Micros Left(std::string_view key, Micros now, std::size_t* dropped) {
    *dropped = 0;
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return 0;
    if (it->second > now) return it->second - now;
    blocks_.erase(it);
    *dropped = 1;
    return 0;
  }
  // Records a block of `key` (not blocked: Left said 0) until `until`. Returns the
  // expired entries swept to make room.
  std::size_t Start(std::string_view key, Micros until, Micros now) {
    std::size_t swept = 0;
    if (blocks_.size() >= sweep_at_) {
      swept = std::erase_if(blocks_, [now](const auto& b) { return b.second <= now; });
      sweep_at_ = std::max<std::size_t>(64, 2 * blocks_.size());
    }
    blocks_.insert_or_assign(std::string(key), until);
    return swept;
  }
  // Ends the block of `key`; returns the entries dropped (0 or 1).
  std::size_t Erase(std::string_view key) {
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return 0;
    blocks_.erase(it);
    return 1;
  }

 private:
  std::map<std::string, Micros, std::less<>> blocks_;
  std::size_t sweep_at_ = 64;
};

// Two cache lines: what every decision writes (the lock and `latest`) on the first,
// the table header (read on every decision, written only by inserts and sweeps) on
// the second, so that threads deciding in the same shard move one line between
// cores, not two.
struct alignas(64) Shard {
  ShardLock mu;
  // The latest `now` this shard has decided at. Decisions use at least this time, so
  // the store's time never goes back: a state dropped because it was back to "full"
  // at a later time is never missed by a request stamped earlier (otherwise whether
  // an idle key had been swept would change that request's decision). Written only
  // when it moves.
  Micros latest = std::numeric_limits<Micros>::min();
  // Blocks of this shard's keys (null until the first one; owned). A plain pointer
  // keeps Shard standard-layout (the offsetof below).
  BlockTable* blocks = nullptr;
  alignas(64) Table table;

  Shard() = default;
  ~Shard() { delete blocks; }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
};
static_assert(offsetof(Shard, table) == 64, "lock and latest share the first line");

// Runs one non-log algorithm on `state` (or a fresh state).
// `max_wait`: StoreCheck::max_wait (reservations; only bucket and GCRA use it).
Decision RunWord(const Policy& p, const State& in, bool fresh, Micros now, std::uint64_t cost,
                 State* out, Micros* expires, Micros max_wait) {
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      return core::FixedWindow(p, in.fixed, fresh, now, cost, &out->fixed, expires);
    case Algorithm::kSlidingWindowCounter:
      return core::SlidingWindowCounter(p, in.counter, fresh, now, cost, &out->counter, expires);
    case Algorithm::kTokenBucket:
      return core::TokenBucket(p, in.bucket, fresh, now, cost, &out->bucket, expires, max_wait);
    case Algorithm::kGcra:
      return core::Gcra(p, in.gcra, fresh, now, cost, &out->gcra, expires, max_wait);
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:
      break;
  }
  return {};
}

// Refunds `cost` to the state in `s` (an existing slot of p's algorithm). A word
// state back to full (expires <= now) is fresh: nothing to give back.
// A carry slot (kCarryTag) is refunded only when it records `carry_id`, p's own
// parameters (0: p's are not registered): a state written under others gives nothing
// back; it keeps its id.
void RefundSlot(const Policy& p, Slot* s, Micros now, std::uint64_t cost, std::uint32_t carry_id) {
  if (p.algorithm == Algorithm::kConcurrency) return;  // permits are released, not refunded
  if (p.algorithm == Algorithm::kSlidingWindowLog) {
    RingLog log(&s->state.log, p.limit);
    core::SlidingWindowLogRefund(p, log, now, cost, &s->expires);
    return;
  }
  if (s->expires <= now) return;
  const bool carry = (s->tag & kCarryTag) != 0;
  if (carry && (carry_id == 0 || CarryId(p.algorithm, s->state) != carry_id)) return;
  const State in = carry ? CleanState(p.algorithm, s->state) : s->state;
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      core::FixedWindowRefund(p, in.fixed, now, cost, &s->state.fixed, &s->expires);
      break;
    case Algorithm::kSlidingWindowCounter:
      core::SlidingWindowCounterRefund(p, in.counter, now, cost, &s->state.counter, &s->expires);
      break;
    case Algorithm::kTokenBucket:
      core::TokenBucketRefund(p, in.bucket, now, cost, &s->state.bucket, &s->expires);
      break;
    case Algorithm::kGcra:
      core::GcraRefund(p, in.gcra, now, cost, &s->state.gcra, &s->expires);
      break;
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:
      break;
  }
  if (carry) SetCarryId(p.algorithm, s->state, carry_id);
}

// Marks a word slot just written for a check whose parameters have id `id` (0: the
// policy records none, kAsIs): a carry slot holding the id, or a plain one.
void MarkCarry(Slot* s, Algorithm a, std::uint32_t id) {
  if (id == 0) {
    s->tag = TagOf(a);
    return;
  }
  s->tag = static_cast<std::uint8_t>(TagOf(a) | kCarryTag);
  SetCarryId(a, s->state, id);
}

// Carry-over: the registry of parameters that carry slots record, by id (1-based;
// 0 means none). It only grows (one entry per distinct limit, window and capacity a
// policy with a carry-over mode has used in this store); past kMaxCarryId entries,
// new parameters get 0 and their states are written without a record (as kAsIs).
class ParamsRegistry {
 public:
  std::uint32_t Id(const Policy& p) {
    const core::WrittenUnder w = core::ParamsOf(p);
    std::lock_guard<std::mutex> lock(mu_);
    const auto k = std::make_tuple(w.limit, w.window, w.cap);
    auto it = ids_.find(k);
    if (it != ids_.end()) return it->second;
    if (list_.size() >= kMaxCarryId) return 0;
    list_.push_back(w);
    const auto id = static_cast<std::uint32_t>(list_.size());
    ids_.emplace(k, id);
    return id;
  }
  core::WrittenUnder Get(std::uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return list_[id - 1];
  }

 private:
  std::mutex mu_;
  std::vector<core::WrittenUnder> list_;
  std::map<std::tuple<double, double, double>, std::uint32_t> ids_;
};

// Applies p.on_change to the state of a carry slot written under parameters `id`
// (!= p's `own` id): false when the state is to be taken as fresh; else `in` holds the
// state to decide on (converted for kProportional, as it is for kAsIs).
bool CarryOver(const Policy& p, ParamsRegistry& registry, std::uint32_t id, Micros now, State* in) {
  if (p.on_change == OnChange::kAsIs) return true;
  if (p.on_change == OnChange::kReset) return false;
  const core::WrittenUnder w = registry.Get(id);
  switch (p.algorithm) {
    case Algorithm::kFixedWindow:
      return core::CarryFixedWindow(p, w, &in->fixed);
    case Algorithm::kSlidingWindowCounter:
      return core::CarrySlidingWindowCounter(p, w, &in->counter);
    case Algorithm::kTokenBucket:
      return core::CarryTokenBucket(p, w, now, &in->bucket);
    case Algorithm::kGcra:
      return core::CarryGcra(p, w, now, &in->gcra);
    case Algorithm::kSlidingWindowLog:
    case Algorithm::kConcurrency:  // only kAsIs is valid for these (ValidatePolicy)
      break;
  }
  return true;
}

constexpr std::size_t kMaxBatch = kMaxBatchChecks;

// True when a check of a decision takes something when its batch allows: a cost above 0.
bool Consumes(const StoreCheck& c) {
  return c.cost > 0;
}

// The prologue every batch shares: each key's hash and shard, the shards
// involved locked in index order (so that batches never deadlock) until the object
// goes, and the batch's time raised to the latest any of them has decided at (the
// store's time never goes back). A batch of one key, the common case, locks one
// shard without sorting.
class LockedShards {
 public:
  LockedShards(std::vector<Shard>& shards, std::span<const StoreCheck> checks, Micros* now)
      : shards_(shards), n_(checks.size()) {
    const std::size_t mask = shards.size() - 1;
    for (std::size_t i = 0; i < n_; ++i) {
      hash[i] = HashKey(checks[i].key);
      shard[i] = memory_internal::ShardIndex(hash[i], mask + 1);
      order_[i] = shard[i];
    }
    if (n_ > 1) {
      std::sort(order_, order_ + n_);
      locked_ = static_cast<std::size_t>(std::unique(order_, order_ + n_) - order_);
    } else {
      locked_ = n_;
    }
    for (std::size_t i = 0; i < locked_; ++i) shards_[order_[i]].mu.lock();
    Micros t = *now;
    for (std::size_t i = 0; i < locked_; ++i) t = std::max(t, shards_[order_[i]].latest);
    for (std::size_t i = 0; i < locked_; ++i) {
      if (shards_[order_[i]].latest != t) shards_[order_[i]].latest = t;
    }
    *now = t;
  }
  ~LockedShards() {
    for (std::size_t i = locked_; i-- > 0;) shards_[order_[i]].mu.unlock();
  }
  LockedShards(const LockedShards&) = delete;
  LockedShards& operator=(const LockedShards&) = delete;

  // The distinct shards locked, in index order.
  std::size_t locked() const { return locked_; }
  Shard& locked_shard(std::size_t i) { return shards_[order_[i]]; }
  Table& table_of(std::size_t check) { return shards_[shard[check]].table; }
  Shard& shard_of(std::size_t check) { return shards_[shard[check]]; }

  std::uint64_t hash[kMaxBatch];
  std::size_t shard[kMaxBatch];

 private:
  std::vector<Shard>& shards_;
  std::size_t n_;
  std::size_t order_[kMaxBatch];
  std::size_t locked_ = 0;
};

}  // namespace

struct MemoryStore::Impl {
  explicit Impl(MemoryStoreOptions o) : options(o) {
    std::size_t n = 1;
    while (n < std::max<std::size_t>(1, o.shards)) n <<= 1;
    shards = std::vector<Shard>(n);
  }

  std::size_t ShardOf(std::uint64_t hash) const {
    return memory_internal::ShardIndex(hash, shards.size());
  }

  // Claims room for one more key (counted in `total` at once, so that concurrent
  // batches and several new keys of one batch cannot overshoot the cap), sweeping
  // `shard` (locked) when the cap is reached. False when the cap is reached and
  // nothing there has expired.
  bool Reserve(Shard& shard, Micros now) {
    std::size_t n = total.load(std::memory_order_relaxed);
    for (;;) {
      if (n < options.max_keys) {
        if (total.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
        continue;  // `n` was reloaded
      }
      if (shard.table.next_expiry() > now) return false;
      const std::size_t removed = shard.table.Sweep(now);
      if (removed == 0) return false;
      total.fetch_sub(removed, std::memory_order_relaxed);
      expired.fetch_add(removed, std::memory_order_relaxed);
      n = total.load(std::memory_order_relaxed);
    }
  }

  // Blocks (Policy::block_for) of check `c` (of a policy with block_for) in `shard`
  // (locked), whose decision is `d`: a blocked key is denied; a denial by the policy
  // itself (`starts`: not during a block) starts a block, recorded if the key cap
  // leaves room for it (otherwise the denial stands without a block, counted in
  // rejected_full). Returns true when it may have swept the shard's table.
  bool ApplyBlocks(Shard& shard, const StoreCheck& c, Micros now, bool starts, Decision* d) {
    std::size_t dropped = 0;
    const Micros left =
        shard.blocks != nullptr ? shard.blocks->Left(c.key, now, &dropped) : Micros{0};
    if (dropped > 0) total.fetch_sub(dropped, std::memory_order_relaxed);
    if (left > 0) {
      core::ApplyBlock(d, left);
      return false;
    }
    if (!starts || d->allowed) return false;
    if (!Reserve(shard, now)) {
      rejected_full.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (shard.blocks == nullptr) shard.blocks = new BlockTable();
    const Micros until = now + c.policy->block_for;
    const std::size_t swept = shard.blocks->Start(c.key, until, now);
    if (swept > 0) total.fetch_sub(swept, std::memory_order_relaxed);
    core::ApplyBlock(d, c.policy->block_for);
    return true;
  }

  MemoryStoreOptions options;
  std::vector<Shard> shards;
  ParamsRegistry carry_params;  // carry-over (Policy::on_change)
  std::atomic<std::size_t> total{0};
  std::atomic<std::uint64_t> rejected_full{0};
  std::atomic<std::uint64_t> expired{0};
};

MemoryStore::MemoryStore(MemoryStoreOptions options) : impl_(std::make_unique<Impl>(options)) {}
MemoryStore::~MemoryStore() = default;

namespace memory_internal {

std::uint64_t Access::Prepare(MemoryStore& store, std::string_view key) {
  const std::uint64_t hash = HashKey(key);
  const std::vector<Shard>& shards = store.impl_->shards;
  shards[ShardIndex(hash, shards.size())].table.Prefetch(hash);
  return hash;
}

Status Access::EvaluateOne(MemoryStore& store, const StoreCheck& c, std::uint64_t hash, Micros now,
                           Decision* out) {
  const Policy& p = *c.policy;
  if (p.algorithm != Algorithm::kSlidingWindowLog && p.algorithm != Algorithm::kConcurrency &&
      p.block_for == 0) {
    // The common case, a word state that is live (not back to full): decided and
    // committed under the shard lock with nothing else to do. It is exactly what the
    // batch path below does for such a check (no reservation, insert or sweep).
    Shard& shard = store.impl_->shards[ShardIndex(hash, store.impl_->shards.size())];
    std::lock_guard<ShardLock> lock(shard.mu);
    Micros t = now;
    if (shard.latest > t) {
      t = shard.latest;
    } else if (shard.latest != t) {
      shard.latest = t;
    }
    Slot* s = shard.table.Find(hash, c.key);
    // (A policy with a carry-over mode records its parameters: the batch path.)
    if (s != nullptr && s->tag == TagOf(p.algorithm) && s->expires > t &&
        p.on_change == OnChange::kAsIs) {
      State next;
      Micros expires;
      *out = RunWord(p, s->state, /*fresh=*/false, t, c.cost, &next, &expires, c.max_wait);
      if (out->allowed && c.cost > 0) {
        s->state = next;
        s->expires = expires;
        shard.table.NoteExpiry(expires);
      }
      return Status::Ok();
    }
  }
  return EvaluateBatch(store, std::span<const StoreCheck>(&c, 1), now, std::span<Decision>(out, 1));
}

}  // namespace memory_internal

Status MemoryStore::Run(const StoreBatch& batch, std::span<Decision> out) {
  if (Status v = ValidateBatch(batch); !v.ok()) return v;
  const std::span<const StoreCheck> checks = batch.checks;
  if (checks.empty()) return Status::Ok();
  if (batch.op != StoreOp::kRefund && out.size() < checks.size()) {
    return Status::InvalidArgument("output span too small");
  }
  using memory_internal::Access;
  switch (batch.op) {
    case StoreOp::kDecide:
      if (checks.size() == 1) {
        return Access::EvaluateOne(*this, checks[0], HashKey(checks[0].key), batch.now, &out[0]);
      }
      return Access::EvaluateBatch(*this, checks, batch.now, out);
    case StoreOp::kRefund:
      return Refund(checks, batch.now);
    case StoreOp::kPenalize:
      return Access::PenalizeBatch(*this, checks, batch.now, out);
    case StoreOp::kRelease:
    case StoreOp::kExtend:
      return Access::PermitBatch(*this, batch.op == StoreOp::kExtend, checks, batch.now, out);
  }
  return Status::InvalidArgument("unknown store operation");
}

Store* MemoryStore::InProcess() {
  return this;
}

// Any batch: the shards involved are locked for the whole batch, every check decided,
// then all are committed or none.
Status memory_internal::Access::EvaluateBatch(MemoryStore& store,
                                              std::span<const StoreCheck> checks, Micros now,
                                              std::span<Decision> out) {
  const std::unique_ptr<MemoryStore::Impl>& impl_ = store.impl_;
  LockedShards locks(impl_->shards, checks, &now);
  const std::uint64_t* hashes = locks.hash;
  const std::size_t nlocks = locks.locked();
  Slot* slots[kMaxBatch];
  // Filled for the checks that use them: left uninitialised, not zeroed per call.
  union NextStates {
    NextStates() {}
    State s[kMaxBatch];
  } next_states;
  State* next = next_states.s;
  Micros expires[kMaxBatch];
  bool all_allowed = true;
  bool consumes = false;
  // Carry-over: the id of each check's parameters when its policy records them (0
  // otherwise), and whether a state was taken as fresh because of a change.
  std::uint32_t carry_id[kMaxBatch];
  bool carried_fresh[kMaxBatch];
  // Set once anything may have moved slots (erase, sweep, insert): found slot
  // pointers must then be looked up again.
  bool moved = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    carry_id[i] = p.on_change != OnChange::kAsIs ? impl_->carry_params.Id(p) : 0;
    carried_fresh[i] = false;
    Slot* s = table.Find(hashes[i], c.key);
    if (s != nullptr && (s->tag & ~kCarryTag) != TagOf(p.algorithm)) {
      // The key was used with another algorithm: its state means nothing here.
      table.EraseSlot(s);
      moved = true;
      impl_->total.fetch_sub(1, std::memory_order_relaxed);
      s = nullptr;
    }
    slots[i] = s;
    if (p.algorithm == Algorithm::kConcurrency) {
      // --- concurrency limits (issue #12 item 1) ---
      // An acquire is decided now and committed with the batch.
      core::PermitId id;
      (void)core::ParsePermitId(c.permit, &id);  // validated above (empty for a peek)
      if (s == nullptr) {
        PermitBuffer empty;
        PermitBuffer* scratch = PermitBuffer::Init(&empty, 1);
        RingPermits set(&scratch, 1);
        out[i] = core::Concurrency(p, set, now, id, c.cost, /*commit=*/false, &expires[i]);
      } else {
        RingPermits set(&s->state.permits, p.limit);
        out[i] = core::Concurrency(p, set, now, id, c.cost, /*commit=*/false, &expires[i]);
      }
    } else if (p.algorithm == Algorithm::kSlidingWindowLog) {
      if (s == nullptr) {
        // Decide against an empty log on the stack; the commit creates the real one.
        LogBuffer empty;
        LogBuffer* scratch = LogBuffer::Init(&empty, 1);
        RingLog log(&scratch, 1);
        out[i] = core::SlidingWindowLog(p, log, now, c.cost, /*commit=*/false, &expires[i]);
      } else {
        RingLog log(&s->state.log, p.limit);
        out[i] = core::SlidingWindowLog(p, log, now, c.cost, /*commit=*/false, &expires[i]);
      }
    } else {
      bool fresh = s == nullptr || s->expires <= now;
      State in = s != nullptr ? s->state : State{};
      if (!fresh && (s->tag & kCarryTag) != 0) {
        // Written with its parameters: carried over when they are not p's.
        in = CleanState(p.algorithm, in);
        const std::uint32_t was = CarryId(p.algorithm, s->state);
        if (was != carry_id[i] &&
            (!CarryOver(p, impl_->carry_params, was, now, &in) ||
             (p.algorithm == Algorithm::kTokenBucket && p.on_change != OnChange::kAsIs &&
              core::TokenBucketIsNew(p, in.bucket, now)))) {
          // Fresh (reset, a window change, or a bucket new again under p): a token
          // bucket then starts like a new one (core/token_bucket.cc).
          fresh = true;
          carried_fresh[i] = true;
        }
      }
      out[i] = RunWord(p, in, fresh, now, c.cost, &next[i], &expires[i], c.max_wait);
    }
    // Blocks (Policy::block_for): a blocked key is denied; a denial by the policy
    // itself (not during a block, and not a peek) starts a block.
    if (p.block_for > 0) [[unlikely]] {
      moved = impl_->ApplyBlocks(locks.shard_of(i), c, now, c.cost > 0, &out[i]) || moved;
    }
    all_allowed = all_allowed && out[i].allowed;
    consumes = consumes || c.cost > 0;
  }

  if (!all_allowed || !consumes) {
    // A token bucket with initial_tokens below its capacity starts at its first
    // request, allowed or not (core/token_bucket.cc), so that it refills from then on.
    for (std::size_t i = 0; i < checks.size(); ++i) {
      const StoreCheck& c = checks[i];
      const Policy& p = *c.policy;
      if (p.algorithm != Algorithm::kTokenBucket || c.cost == 0 ||
          !core::TokenBucketStartsOnDenial(p)) {
        continue;
      }
      Shard& shard = locks.shard_of(i);
      Slot* s = shard.table.Find(hashes[i], c.key);
      if (s != nullptr && s->expires > now && !carried_fresh[i]) continue;  // started already
      if (s == nullptr) {
        // At the key cap the bucket is not started: the request was denied anyway,
        // and the next one starts it.
        if (!impl_->Reserve(shard, now)) continue;
        s = shard.table.Insert(hashes[i], c.key, p.algorithm);
      }
      core::TokenBucketStart(p, now, &s->state.bucket, &s->expires);
      MarkCarry(s, p.algorithm, carry_id[i]);
      shard.table.NoteExpiry(s->expires);
    }
    return Status::Ok();
  }

  // Commit: reserve room for missing keys first (may hit the cap: then nothing is
  // consumed, and the reservations are returned). A known key that has expired may
  // be dropped by a reserving sweep and inserted again, so it reserves room too.
  bool needs_room[kMaxBatch];
  for (std::size_t i = 0; i < checks.size(); ++i) {
    needs_room[i] = Consumes(checks[i]) && (slots[i] == nullptr || slots[i]->expires <= now);
  }
  std::size_t reserved = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    if (!needs_room[i]) continue;
    Shard& shard = locks.shard_of(i);
    moved = true;  // Reserve may sweep
    if (!impl_->Reserve(shard, now)) {
      impl_->total.fetch_sub(reserved, std::memory_order_relaxed);
      impl_->rejected_full.fetch_add(1, std::memory_order_relaxed);
      return Status::ResourceExhausted("in-process store is full (" +
                                       std::to_string(impl_->options.max_keys) + " keys)");
    }
    ++reserved;
  }
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    if (!Consumes(c)) continue;
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    // The common case (every key known) reuses the slots found above.
    Slot* s = moved ? table.Find(hashes[i], c.key) : slots[i];
    if (s == nullptr) {
      s = table.Insert(hashes[i], c.key, p.algorithm);
      moved = true;  // a growing table moves every slot
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        s->state.log =
            LogBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
      }
      if (p.algorithm == Algorithm::kConcurrency) {
        s->state.permits =
            PermitBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
      }
      ++inserts;
    }
    if (p.algorithm == Algorithm::kConcurrency) {
      core::PermitId id;
      (void)core::ParsePermitId(c.permit, &id);
      RingPermits set(&s->state.permits, p.limit);
      core::ConcurrencyCommit(p, set, now, id, &s->expires);
    } else if (p.algorithm == Algorithm::kSlidingWindowLog) {
      RingLog log(&s->state.log, p.limit);
      core::SlidingWindowLogCommit(p, log, now, c.cost, &s->expires);
    } else {
      s->state = next[i];
      s->expires = expires[i];
      MarkCarry(s, p.algorithm, carry_id[i]);
    }
    table.NoteExpiry(s->expires);
  }
  // Return the reservations not used (an expired key that was not swept, or a key
  // that came twice in the batch). Every insert had one.
  if (reserved > inserts) impl_->total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  // Incremental expiry, paid by inserts only: the sweep hand walks the whole table, so
  // each step is a cache miss that a decision on a known key should not pay. Tables
  // only grow through inserts, and each insert examines 4 slots, so idle keys are
  // reclaimed faster than new ones arrive. (At the key cap, Reserve sweeps fully.)
  // Every slot of this batch now expires after `now`, so this cannot remove one.
  for (std::size_t i = 0; inserts > 0 && i < nlocks; ++i) {
    const std::size_t removed = locks.locked_shard(i).table.SweepSome(now, 4);
    if (removed > 0) {
      impl_->total.fetch_sub(removed, std::memory_order_relaxed);
      impl_->expired.fetch_add(removed, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

// Penalties (StoreCheck::force): every check's cost is consumed whatever the
// decision (bounded, core/penalties.cc), and its decision is a peek at the state after;
// a key left over its limit starts its block (Policy::block_for) unless it is blocked.
// All checks are applied, or none (the key cap).
Status memory_internal::Access::PenalizeBatch(MemoryStore& store,
                                              std::span<const StoreCheck> checks, Micros now,
                                              std::span<Decision> out) {
  const std::unique_ptr<MemoryStore::Impl>& impl_ = store.impl_;
  LockedShards locks(impl_->shards, checks, &now);
  // Room for the keys that need a slot (as EvaluateBatch's commit): a key of another
  // algorithm is dropped first, its state means nothing here.
  std::size_t reserved = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    if (s != nullptr && s->tag != TagOf(c.policy->algorithm)) {
      table.EraseSlot(s);
      impl_->total.fetch_sub(1, std::memory_order_relaxed);
      s = nullptr;
    }
    if (s != nullptr && s->expires > now) continue;
    if (!impl_->Reserve(locks.shard_of(i), now)) {
      impl_->total.fetch_sub(reserved, std::memory_order_relaxed);
      impl_->rejected_full.fetch_add(1, std::memory_order_relaxed);
      return Status::ResourceExhausted("in-process store is full (" +
                                       std::to_string(impl_->options.max_keys) + " keys)");
    }
    ++reserved;
  }
  std::size_t inserts = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    bool fresh = s == nullptr || s->expires <= now;
    if (s == nullptr) {
      s = table.Insert(locks.hash[i], c.key, p.algorithm);
      if (p.algorithm == Algorithm::kSlidingWindowLog) {
        s->state.log =
            LogBuffer::Make(static_cast<std::uint32_t>(std::min<std::uint64_t>(p.limit, 4)));
      }
      ++inserts;
    }
    if (p.algorithm == Algorithm::kSlidingWindowLog) {
      RingLog log(&s->state.log, p.limit);
      out[i] = core::SlidingWindowLogPenalize(p, log, now, c.cost, &s->expires);
    } else {
      const State in = s->state;
      switch (p.algorithm) {
        case Algorithm::kFixedWindow:
          out[i] = core::FixedWindowPenalize(p, in.fixed, fresh, now, c.cost, &s->state.fixed,
                                             &s->expires);
          break;
        case Algorithm::kSlidingWindowCounter:
          out[i] = core::SlidingWindowCounterPenalize(p, in.counter, fresh, now, c.cost,
                                                      &s->state.counter, &s->expires);
          break;
        case Algorithm::kTokenBucket:
          out[i] = core::TokenBucketPenalize(p, in.bucket, fresh, now, c.cost, &s->state.bucket,
                                             &s->expires);
          break;
        case Algorithm::kGcra:
          out[i] = core::GcraPenalize(p, in.gcra, fresh, now, c.cost, &s->state.gcra, &s->expires);
          break;
        case Algorithm::kSlidingWindowLog:  // handled above
        case Algorithm::kConcurrency:       // no penalties (Limiter::Penalize refuses them)
          break;
      }
    }
    table.NoteExpiry(s->expires);
    if (p.block_for > 0) (void)impl_->ApplyBlocks(locks.shard_of(i), c, now, true, &out[i]);
  }
  if (reserved > inserts) impl_->total.fetch_sub(reserved - inserts, std::memory_order_relaxed);
  return Status::Ok();
}

// Refunds (validated: applied to every check or to none).
Status MemoryStore::Refund(std::span<const StoreCheck> checks, Micros now) {
  // Same prologue (and time rule) as a decision.
  LockedShards locks(impl_->shards, checks, &now);
  // Refunds insert and erase nothing, so slots found stay where they are.
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    // No state, or another algorithm's: nothing of this policy to give back.
    if (s == nullptr || (s->tag & ~kCarryTag) != TagOf(c.policy->algorithm)) continue;
    const std::uint32_t own =
        (s->tag & kCarryTag) != 0 ? impl_->carry_params.Id(*c.policy) : std::uint32_t{0};
    RefundSlot(*c.policy, s, now, c.cost, own);
    table.NoteExpiry(s->expires);
  }
  return Status::Ok();
}

// Release and extend (concurrency checks, validated): each applied on its own.
Status memory_internal::Access::PermitBatch(MemoryStore& store, bool extend,
                                            std::span<const StoreCheck> checks, Micros now,
                                            std::span<Decision> out) {
  const std::unique_ptr<MemoryStore::Impl>& impl_ = store.impl_;
  LockedShards locks(impl_->shards, checks, &now);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const StoreCheck& c = checks[i];
    const Policy& p = *c.policy;
    Table& table = locks.table_of(i);
    Slot* s = table.Find(locks.hash[i], c.key);
    if (s != nullptr && (s->tag & ~kCarryTag) != TagOf(p.algorithm)) {
      // The key was used with another algorithm: its state means nothing here.
      table.EraseSlot(s);
      impl_->total.fetch_sub(1, std::memory_order_relaxed);
      s = nullptr;
    }
    core::PermitId id;
    (void)core::ParsePermitId(c.permit, &id);  // validated
    Micros expires = 0;
    PermitBuffer empty;
    PermitBuffer* scratch = PermitBuffer::Init(&empty, 1);
    RingPermits set(s != nullptr ? &s->state.permits : &scratch, s != nullptr ? p.limit : 1);
    out[i] = extend ? core::ConcurrencyExtend(p, set, now, id, &expires)
                    : core::ConcurrencyRelease(p, set, now, id, &expires);
    if (s != nullptr) {
      s->expires = expires;
      table.NoteExpiry(s->expires);
    }
  }
  return Status::Ok();
}

Status MemoryStore::Reset(const Policy& policy, std::string_view key) {
  (void)policy;
  const std::uint64_t h = HashKey(key);
  Shard& shard = impl_->shards[impl_->ShardOf(h)];
  std::lock_guard<ShardLock> lock(shard.mu);
  if (Slot* s = shard.table.Find(h, key)) {
    shard.table.EraseSlot(s);
    impl_->total.fetch_sub(1, std::memory_order_relaxed);
  }
  if (shard.blocks != nullptr && shard.blocks->Erase(key) > 0) {  // Reset ends a block too
    impl_->total.fetch_sub(1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

std::size_t MemoryStore::SweepExpired(Micros now) {
  std::size_t removed = 0;
  for (Shard& shard : impl_->shards) {
    std::lock_guard<ShardLock> lock(shard.mu);
    if (shard.table.next_expiry() > now) continue;  // nothing there can have expired
    const std::size_t n = shard.table.Sweep(now);
    impl_->total.fetch_sub(n, std::memory_order_relaxed);
    impl_->expired.fetch_add(n, std::memory_order_relaxed);
    removed += n;
  }
  return removed;
}

MemoryStoreStats MemoryStore::Stats() const {
  MemoryStoreStats s;
  s.keys = impl_->total.load(std::memory_order_relaxed);
  s.rejected_full = impl_->rejected_full.load(std::memory_order_relaxed);
  s.expired = impl_->expired.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice
