// sluice_redis_module.so: the native Redis module (docs/redis.md, "The native module").
// Loaded with `--loadmodule /usr/lib/sluice/sluice_redis_module.so`, it adds
//   SLUICE.DECIDE numkeys key... args...  (module/wire.h: the layout)
//   SLUICE.VERSION                        (the layout version, for the client's probe)
// Each SLUICE.DECIDE decides its groups of checks atomically (Redis runs one command
// at a time) on the server's clock, through engine.h, and writes the states the Lua
// scripts write, each with a TTL. It replicates its EFFECTS: each write goes to the
// replicas and the AOF as `SET key value PXAT <ms>`, so a replica never decides on
// its own clock; a sliding log's sorted set and a permit set are written with the
// script's own commands (redis_sets.h: a permit's through the sorted-set API, the rest
// through RedisModule_Call with "!"; replicated as the script's effects are, PEXPIRE as
// PEXPIREAT), in order with those SETs (Redis 7 and Valkey 8 propagate both, in the
// order they are made, as one transaction at the command's end). Its keys are
// declared (getkeys-api), so Redis Cluster routes the command and refuses a cross-slot
// one, as it does for scripts.
#include <sys/time.h>

#include <charconv>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "redis/module/engine.h"
#include "redis/module/module_api.h"
#include "redis/module/redis_sets.h"
#include "redis/module/wire.h"

namespace sluice::redis_module {

ModuleApi api;

namespace {

// A stored value longer than this is not a state any layout has (the longest is a
// sliding log's inline form, 153 bytes): it is read as a foreign value, without copying
// it.
constexpr std::size_t kMaxStateBytes = sizeof(StateBytes::data);
constexpr std::string_view kForeign = "\xff";

template <typename F>
bool Resolve(const char* name, F** out) {
  return api.GetApi(name, reinterpret_cast<void*>(out)) == kOk && *out != nullptr;
}

Micros ServerNowMicros() {
  if (api.Microseconds != nullptr) return api.Microseconds();
  timeval tv{};
  gettimeofday(&tv, nullptr);  // what TIME answers
  return static_cast<Micros>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
}

// One group's keys while it is decided: each opened once for reading and writing, its
// value copied (the decisions read it after other keys moved).
struct GroupKeys {
  RedisModuleKey* keys[kMaxBatchChecks] = {};
  char copies[kMaxBatchChecks][kMaxStateBytes];
  StoredValue values[kMaxBatchChecks];
  // Each check's block key (a policy with block_for), read and closed; else not present.
  char block_copies[kMaxBatchChecks][kMaxStateBytes];
  StoredValue blocks[kMaxBatchChecks];
  std::size_t n = 0;

  ~GroupKeys() { Close(); }
  void Close() {
    for (std::size_t i = 0; i < n; ++i) {
      if (keys[i] != nullptr) api.CloseKey(keys[i]);
      keys[i] = nullptr;
    }
    n = 0;
  }
};

// True when a key of `names` comes twice: two handles on one key are not safe (a read
// may replace the value the other handle points to, a sliding log's command delete
// it), so such a group opens each key for each access instead.
bool Repeats(RedisModuleString** names, std::size_t n) {
  std::string_view seen[2 * kMaxBatchChecks];
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t len = 0;
    const char* p = api.StringPtrLen(names[i], &len);
    seen[i] = {p, len};
    for (std::size_t j = 0; j < i; ++j) {
      if (seen[j] == seen[i]) return true;
    }
  }
  return false;
}

// The constant words of the replicated SETs, made once at load: a write passes them
// (and the key's own argument) to Replicate as strings it only references, so that each
// write builds just its value and its expiry.
RedisModuleString* word_pxat = nullptr;
RedisModuleString* word_keepttl = nullptr;

// Reads key `name` into `*value` (its bytes copied to `copy`), kept open in `*keep`
// when given; false when it holds another type than a string (a script's GET fails
// there too).
bool ReadKey(RedisModuleCtx* ctx, RedisModuleString* name, RedisModuleKey** keep,
             char (&copy)[kMaxStateBytes], StoredValue* value) {
  RedisModuleKey* key = api.OpenKey(ctx, name, kRead | kWrite);
  *value = StoredValue{};
  const int type = key != nullptr ? api.KeyType(key) : kKeyTypeEmpty;
  if (type == kKeyTypeString) {
    std::size_t len = 0;
    const char* p = api.StringDMA(key, &len, kRead);
    if (p != nullptr && len <= kMaxStateBytes) {
      std::memcpy(copy, p, len);
      *value = StoredValue{true, {copy, len}};
    } else {
      *value = StoredValue{true, kForeign};
    }
  }
  if (keep != nullptr) {
    *keep = key;
  } else if (key != nullptr) {
    api.CloseKey(key);
  }
  return type == kKeyTypeEmpty || type == kKeyTypeString;
}

// Writes `w` (with its TTL, an absolute expiry at `now_ms` + ttl) through `key` (open
// for writing, or null: opened here) and replicates exactly that, or nothing when the
// key refuses it.
void Write(RedisModuleCtx* ctx, RedisModuleString* name, RedisModuleKey* key, const ModuleWrite& w,
           long long now_ms) {
  const bool own = key == nullptr;
  if (own) key = api.OpenKey(ctx, name, kRead | kWrite);
  if (key == nullptr) return;
  const long long at = now_ms + w.ttl_ms;
  // (refused when the key is no longer a string: a malformed call that named it as a
  // sorted set too. Nothing is written then, and nothing replicated.)
  const bool written = api.StringTruncate(key, w.value.size) == kOk;
  if (written) {
    std::size_t len = 0;
    char* p = api.StringDMA(key, &len, kWrite);
    if (p != nullptr && len == w.value.size) std::memcpy(p, w.value.data, len);
    if (!w.keep_ttl) api.SetAbsExpire(key, at);
  }
  if (own) api.CloseKey(key);
  if (!written) return;
  const auto size = static_cast<std::size_t>(w.value.size);
  if (w.keep_ttl) {
    api.Replicate(ctx, "SET", "sbs", name, w.value.data, size, word_keepttl);
  } else {
    // (digits given as a buffer: Redis makes an 'l' argument with one allocation more)
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof(digits), at).ptr;
    api.Replicate(ctx, "SET", "sbsb", name, w.value.data, size, word_pxat, digits,
                  static_cast<std::size_t>(end - digits));
  }
}

// A call's working storage, kept from one call to the next (Redis runs one command at a
// time, on one thread): a call allocates nothing once the sizes it needs have been seen.
struct CallStorage {
  std::vector<std::string_view> args;
  ModuleRequest req;
  std::vector<long long> reply;
  std::vector<ModuleWrite> writes;
};

constexpr const char* kWrongType =
    "WRONGTYPE Operation against a key holding the wrong kind of value (sluice keys are "
    "strings)";

// One group of a call: its request, the keys' names (argv after numkeys), its clock.
struct GroupCall {
  RedisModuleCtx* ctx;
  const ModuleRequest& req;
  const ModuleGroup& group;
  RedisModuleString** names;
  Micros now;
  long long now_ms;
};

// The key write `w` goes to (state key `state`, open as `open` or not).
void WriteOne(const GroupCall& c, RedisModuleString* state, RedisModuleKey* open,
              const ModuleWrite& w) {
  const ModuleCheck& check = c.req.checks[w.check];
  switch (w.to) {
    case WriteTo::kBlock:
      return Write(c.ctx, c.names[check.block_key], nullptr, w, c.now_ms);
    case WriteTo::kRecord:
      return Write(c.ctx, c.names[check.record_key], nullptr, w, c.now_ms);
    case WriteTo::kState:
      return Write(c.ctx, state, open, w, c.now_ms);
  }
}

// Decides a group (not a settle): every key read, then decided (engine.h; a sliding
// log's sorted set as it goes), then written. Returns an error reply's text (kept in
// `*error` when it is made here), or null.
const char* DecideOneGroup(const GroupCall& c, GroupKeys& g, std::vector<ModuleWrite>& writes,
                           std::vector<long long>& reply, std::string* error) {
  const ModuleRequest& req = c.req;
  const std::size_t n = c.group.end - c.group.begin;
  // (the state keys, then the sliding logs' sorted sets: none may be another's; a
  // concurrency limit's state key is its permit set)
  RedisModuleString* keys[2 * kMaxBatchChecks];
  std::size_t m = n;
  for (std::size_t i = 0; i < n; ++i) {
    const ModuleCheck& check = req.checks[c.group.begin + i];
    keys[i] = c.names[check.key];
    if (check.log_key >= 0) keys[m++] = c.names[check.log_key];
  }
  const bool keep = !Repeats(keys, m);
  g.n = n;
  for (std::size_t i = 0; i < n; ++i) {
    const ModuleCheck& check = req.checks[c.group.begin + i];
    const int block = check.block_key;
    g.blocks[i] = StoredValue{};
    if (req.policies[check.policy].algorithm == Algorithm::kConcurrency) {
      g.values[i] = StoredValue{};  // (its set is reached through RedisSets, never held open)
      continue;
    }
    if (!ReadKey(c.ctx, keys[i], keep ? &g.keys[i] : nullptr, g.copies[i], &g.values[i]) ||
        (block >= 0 && !ReadKey(c.ctx, c.names[block], nullptr, g.block_copies[i], &g.blocks[i]))) {
      return kWrongType;
    }
  }
  writes.clear();
  RedisSets sets(c.ctx, c.names, c.now_ms);
  DecideGroup(req, c.group, c.now, {g.values, n}, {g.blocks, n}, sets, &writes, &reply);
  if (!sets.error().empty()) {
    *error = "ERR sluice: " + sets.error();
    return error->c_str();
  }
  for (const ModuleWrite& w : writes) {
    const std::size_t i = w.check - c.group.begin;
    WriteOne(c, keys[i], keep ? g.keys[i] : nullptr, w);
  }
  g.Close();
  return nullptr;
}

// The reservation id of check `check`'s record key (the state key + ":u:" + id).
std::string RecordId(const GroupCall& c, const ModuleCheck& check) {
  std::size_t klen = 0, rlen = 0;
  const char* k = api.StringPtrLen(c.names[check.key], &klen);
  const char* r = api.StringPtrLen(c.names[check.record_key], &rlen);
  const std::string_view key(k, klen), record(r, rlen);
  if (record.size() > key.size() + 3 && record.starts_with(key) &&
      record.substr(key.size(), 3) == ":u:") {
    return std::string(record.substr(key.size() + 3));
  }
  return std::string(record);
}

// A group of settles (runner.lua's settle_group): every record found first (one unknown
// or expired: the NOTFOUND error in `*error`, nothing settled), then each check settled
// on its own, on what its keys hold after the checks before it. Returns an error reply's
// text, or null.
const char* SettleGroup(const GroupCall& c, std::vector<ModuleWrite>& writes,
                        std::vector<long long>& reply, std::string* error) {
  const ModuleRequest& req = c.req;
  UsageRecord records[kMaxBatchChecks];
  char copy[kMaxStateBytes];
  for (std::size_t i = c.group.begin; i < c.group.end; ++i) {
    const ModuleCheck& check = req.checks[i];
    StoredValue v;
    if (!ReadKey(c.ctx, c.names[check.record_key], nullptr, copy, &v)) return kWrongType;
    if (!ReadUsageRecord(v, c.now, &records[i - c.group.begin])) {
      *error = "NOTFOUND usage reservation '" + RecordId(c, check) +
               "' is unknown or expired (nothing was settled)";
      return error->c_str();
    }
  }
  for (std::size_t i = c.group.begin; i < c.group.end; ++i) {
    const ModuleCheck& check = req.checks[i];
    char value_copy[kMaxStateBytes], block_copy[kMaxStateBytes];
    StoredValue value, block;
    if (!ReadKey(c.ctx, c.names[check.key], nullptr, value_copy, &value) ||
        (check.block_key >= 0 &&
         !ReadKey(c.ctx, c.names[check.block_key], nullptr, block_copy, &block))) {
      return kWrongType;
    }
    writes.clear();
    RedisSets sets(c.ctx, c.names, c.now_ms);
    SettleCheck(req, i, c.now, records[i - c.group.begin], value, block, sets, &writes, &reply);
    if (!sets.error().empty()) {
      *error = "ERR sluice: " + sets.error();
      return error->c_str();
    }
    for (const ModuleWrite& w : writes) WriteOne(c, c.names[check.key], nullptr, w);
  }
  return nullptr;
}

// The call's storage (CallStorage): one per process, as Redis runs one command at a time.
CallStorage& Storage() {
  static CallStorage storage;
  return storage;
}

// Decides the call whose arguments after the command name are `args` (wire.h's layout:
// numkeys, the keys, the head, the policies and the checks) and whose keys are `names`.
int DecideArgs(RedisModuleCtx* ctx, RedisModuleString** names,
               std::span<const std::string_view> args) {
  CallStorage& storage = Storage();
  ModuleRequest& req = storage.req;
  std::string error;
  if (!ParseModuleRequest(args, &req, &error)) {
    for (char& ch : error) {
      if (ch == '\r' || ch == '\n') ch = ' ';  // an error reply is one line
    }
    return api.ReplyWithError(ctx, ("ERR sluice: " + error).c_str());
  }
  const Micros server_now = ServerNowMicros();
  // (Redis's clock in ms for the keys' absolute expiries: the same reading, not a second)
  const long long now_ms = server_now / 1000;
  std::vector<long long>& reply = storage.reply;
  reply.clear();
  std::vector<ModuleWrite>& writes = storage.writes;
  GroupKeys g;
  std::string error_text;
  for (const ModuleGroup& group : req.groups) {
    // Groups run one after the other, as the script's: a key of another type (or a
    // settle's unknown record, or a damaged sorted set) fails the call there, after the
    // groups before it (a single group writes nothing then).
    const GroupCall call{
        ctx, req, group, names, req.caller_time ? req.checks[group.begin].now : server_now, now_ms};
    const char* error = group.op == StoreOp::kSettle
                            ? SettleGroup(call, writes, reply, &error_text)
                            : DecideOneGroup(call, g, writes, reply, &error_text);
    if (error != nullptr) return api.ReplyWithError(ctx, error);
  }
  api.ReplyWithArray(ctx, static_cast<long>(reply.size()));
  for (long long v : reply) api.ReplyWithLongLong(ctx, v);
  return kOk;
}

// The arguments of SLUICE.DECIDE (argv after the command name) as views.
std::span<const std::string_view> ArgViews(RedisModuleString** argv, int argc) {
  std::vector<std::string_view>& args = Storage().args;
  const std::size_t nargs = argc > 1 ? static_cast<std::size_t>(argc - 1) : 0;
  if (args.size() < nargs) args.resize(nargs);
  for (std::size_t i = 0; i < nargs; ++i) {
    std::size_t len = 0;
    const char* p = api.StringPtrLen(argv[i + 1], &len);
    args[i] = {p, len};
  }
  return {args.data(), nargs};
}

int Decide(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  const std::span<const std::string_view> args = ArgViews(argv, argc);
  if (api.IsKeysPositionRequest(ctx)) {
    const std::size_t n = ModuleKeyCount(args);
    for (std::size_t i = 0; i < n; ++i) api.KeyAtPos(ctx, static_cast<int>(2 + i));
    return kOk;
  }
  if (argc < 2) return api.WrongArity(ctx);
  return DecideArgs(ctx, argv + 2, args);
}

// SLUICE.DECIDE1 key policy check: SLUICE.DECIDE of one check on one key, on the
// server's clock (wire.h), with the head that call would have.
int Decide1(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  if (argc != 4) return api.WrongArity(ctx);
  std::string_view v[3];
  for (int i = 0; i < 3; ++i) {
    std::size_t len = 0;
    const char* p = api.StringPtrLen(argv[i + 1], &len);
    v[i] = {p, len};
  }
  static const std::string version = std::to_string(redis::kModuleWireVersion);
  const std::string_view args[] = {"1", v[0], version, "", "0", "1", v[1], v[2]};
  return DecideArgs(ctx, argv + 1, args);
}

int DecideCommand(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  try {
    return Decide(ctx, argv, argc);
  } catch (const std::exception& e) {  // (out of memory): an error, never a crash
    return api.ReplyWithError(ctx, (std::string("ERR sluice: ") + e.what()).c_str());
  }
}

int Decide1Command(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  try {
    return Decide1(ctx, argv, argc);
  } catch (const std::exception& e) {  // (out of memory): an error, never a crash
    return api.ReplyWithError(ctx, (std::string("ERR sluice: ") + e.what()).c_str());
  }
}

int VersionCommand(RedisModuleCtx* ctx, RedisModuleString** /*argv*/, int /*argc*/) {
  return api.ReplyWithLongLong(ctx, redis::kModuleWireVersion);
}

}  // namespace

int ModuleApiInit(RedisModuleCtx* ctx, const char* name, int version) {
  // The lookup function is the first word of the context (redismodule.h's
  // RedisModule_Init reads it the same way).
  void* lookup = reinterpret_cast<void**>(ctx)[0];
  api.GetApi = reinterpret_cast<int (*)(const char*, void*)>(lookup);
  const bool ok = Resolve("RedisModule_SetModuleAttribs", &api.SetModuleAttribs) &&
                  Resolve("RedisModule_CreateCommand", &api.CreateCommand) &&
                  Resolve("RedisModule_IsKeysPositionRequest", &api.IsKeysPositionRequest) &&
                  Resolve("RedisModule_KeyAtPos", &api.KeyAtPos) &&
                  Resolve("RedisModule_WrongArity", &api.WrongArity) &&
                  Resolve("RedisModule_ReplyWithError", &api.ReplyWithError) &&
                  Resolve("RedisModule_ReplyWithLongLong", &api.ReplyWithLongLong) &&
                  Resolve("RedisModule_ReplyWithArray", &api.ReplyWithArray) &&
                  Resolve("RedisModule_StringPtrLen", &api.StringPtrLen) &&
                  Resolve("RedisModule_OpenKey", &api.OpenKey) &&
                  Resolve("RedisModule_CloseKey", &api.CloseKey) &&
                  Resolve("RedisModule_KeyType", &api.KeyType) &&
                  Resolve("RedisModule_StringDMA", &api.StringDMA) &&
                  Resolve("RedisModule_StringTruncate", &api.StringTruncate) &&
                  Resolve("RedisModule_SetAbsExpire", &api.SetAbsExpire) &&
                  Resolve("RedisModule_Replicate", &api.Replicate) &&
                  Resolve("RedisModule_CreateString", &api.CreateString) &&
                  Resolve("RedisModule_FreeString", &api.FreeString) &&
                  Resolve("RedisModule_Call", &api.Call) &&
                  Resolve("RedisModule_CallReplyType", &api.CallReplyType) &&
                  Resolve("RedisModule_CallReplyLength", &api.CallReplyLength) &&
                  Resolve("RedisModule_CallReplyArrayElement", &api.CallReplyArrayElement) &&
                  Resolve("RedisModule_CallReplyStringPtr", &api.CallReplyStringPtr) &&
                  Resolve("RedisModule_CallReplyInteger", &api.CallReplyInteger) &&
                  Resolve("RedisModule_FreeCallReply", &api.FreeCallReply) &&
                  Resolve("RedisModule_ValueLength", &api.ValueLength) &&
                  Resolve("RedisModule_ZsetAdd", &api.ZsetAdd) &&
                  Resolve("RedisModule_ZsetRem", &api.ZsetRem) &&
                  Resolve("RedisModule_ZsetScore", &api.ZsetScore) &&
                  Resolve("RedisModule_ZsetFirstInScoreRange", &api.ZsetFirstInScoreRange) &&
                  Resolve("RedisModule_ZsetLastInScoreRange", &api.ZsetLastInScoreRange) &&
                  Resolve("RedisModule_ZsetRangeCurrentElement", &api.ZsetRangeCurrentElement) &&
                  Resolve("RedisModule_ZsetRangeEndReached", &api.ZsetRangeEndReached) &&
                  Resolve("RedisModule_ZsetRangeStop", &api.ZsetRangeStop);
  if (!ok) return kErr;
  if (!Resolve("RedisModule_Microseconds", &api.Microseconds)) api.Microseconds = nullptr;
  if (Resolve("RedisModule_IsModuleNameBusy", &api.IsModuleNameBusy) &&
      api.IsModuleNameBusy(name)) {
    return kErr;
  }
  api.SetModuleAttribs(ctx, name, version, kApiVersion1);
  return kOk;
}

}  // namespace sluice::redis_module

extern "C" __attribute__((visibility("default"))) int RedisModule_OnLoad(
    RedisModuleCtx* ctx, RedisModuleString** /*argv*/, int /*argc*/) {
  using namespace sluice::redis_module;
  if (ModuleApiInit(ctx, "sluice", 1) != kOk) return kErr;
  word_pxat = api.CreateString(ctx, "PXAT", 4);
  word_keepttl = api.CreateString(ctx, "KEEPTTL", 7);
  // getkeys-api: the keys are argv[2 .. 2 + numkeys) (Decide reports them).
  if (api.CreateCommand(ctx, "sluice.decide", DecideCommand, "write deny-oom getkeys-api", 0, 0,
                        0) != kOk) {
    return kErr;
  }
  // Its one key is argv[1].
  if (api.CreateCommand(ctx, "sluice.decide1", Decide1Command, "write deny-oom", 1, 1, 1) != kOk) {
    return kErr;
  }
  if (api.CreateCommand(ctx, "sluice.version", VersionCommand, "readonly fast", 0, 0, 0) != kOk) {
    return kErr;
  }
  return kOk;
}

// MODULE UNLOAD: the words made at load go with the module.
extern "C" __attribute__((visibility("default"))) int RedisModule_OnUnload(RedisModuleCtx* ctx) {
  using namespace sluice::redis_module;
  api.FreeString(ctx, word_pxat);
  api.FreeString(ctx, word_keepttl);
  word_pxat = word_keepttl = nullptr;
  return kOk;
}
