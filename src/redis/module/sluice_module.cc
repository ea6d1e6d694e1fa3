// sluice_redis_module.so: the native Redis module (docs/redis.md, "The native module").
// Loaded with `--loadmodule /usr/lib/sluice/sluice_redis_module.so`, it adds
//   SLUICE.DECIDE numkeys key... args...  (module/wire.h: the layout)
//   SLUICE.VERSION                        (the layout version, for the client's probe)
// Each SLUICE.DECIDE decides its groups of checks atomically (Redis runs one command
// at a time) on the server's clock, through engine.h, and writes the states the Lua
// scripts write, each with a TTL. It replicates its EFFECTS: each write goes to the
// replicas and the AOF as `SET key value PXAT <ms>`, so a replica never decides on
// its own clock. Its keys are declared (getkeys-api), so Redis Cluster routes the
// command and refuses a cross-slot one, as it does for scripts.
#include <sys/time.h>

#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "redis/module/engine.h"
#include "redis/module/module_api.h"
#include "redis/module/wire.h"

namespace sluice::redis_module {

ModuleApi api;

namespace {

// A stored value longer than this is not a state any layout has (the longest is 57
// bytes): it is read as a foreign value, without copying it.
constexpr std::size_t kMaxStateBytes = 128;
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

// Reads the values of the group's keys (copied: a write may move them).
void ReadGroup(RedisModuleCtx* ctx, RedisModuleString** keys, std::size_t n, std::string* copies,
               StoredValue* values) {
  for (std::size_t i = 0; i < n; ++i) {
    RedisModuleKey* key = api.OpenKey(ctx, keys[i], kRead);
    values[i] = StoredValue{};
    if (key != nullptr && api.KeyType(key) == kKeyTypeString) {
      std::size_t len = 0;
      const char* p = api.StringDMA(key, &len, kRead);
      if (p != nullptr && len <= kMaxStateBytes) {
        copies[i].assign(p, len);
        values[i] = StoredValue{true, copies[i]};
      } else {
        values[i] = StoredValue{true, kForeign};
      }
    }
    if (key != nullptr) api.CloseKey(key);
  }
}

// Writes `w` to `name` with its TTL (an absolute expiry) and replicates exactly that.
void Write(RedisModuleCtx* ctx, RedisModuleString* name, const ModuleWrite& w) {
  RedisModuleKey* key = api.OpenKey(ctx, name, kRead | kWrite);
  if (key == nullptr) return;
  const long long at = api.Milliseconds() + w.ttl_ms;
  if (api.StringTruncate(key, w.value.size()) == kOk) {
    std::size_t len = 0;
    char* p = api.StringDMA(key, &len, kWrite);
    if (p != nullptr && len == w.value.size()) std::memcpy(p, w.value.data(), len);
    api.SetAbsExpire(key, at);
  }
  api.CloseKey(key);
  std::size_t klen = 0;
  const char* k = api.StringPtrLen(name, &klen);
  api.Replicate(ctx, "SET", "bbcl", k, klen, w.value.data(), w.value.size(), "PXAT", at);
}

// Every key must be a string or absent before anything is written (a script's GET
// would fail on the first other one, after writing the groups before it).
bool KeysAreStrings(RedisModuleCtx* ctx, RedisModuleString** keys, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    RedisModuleKey* key = api.OpenKey(ctx, keys[i], kRead);
    const int type = key != nullptr ? api.KeyType(key) : kKeyTypeEmpty;
    if (key != nullptr) api.CloseKey(key);
    if (type != kKeyTypeEmpty && type != kKeyTypeString) return false;
  }
  return true;
}

int Decide(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  std::vector<std::string_view> args;
  args.reserve(static_cast<std::size_t>(argc));
  for (int i = 1; i < argc; ++i) {
    std::size_t len = 0;
    const char* p = api.StringPtrLen(argv[i], &len);
    args.emplace_back(p, len);
  }
  if (api.IsKeysPositionRequest(ctx)) {
    const std::size_t n = ModuleKeyCount(args);
    for (std::size_t i = 0; i < n; ++i) api.KeyAtPos(ctx, static_cast<int>(2 + i));
    return kOk;
  }
  if (argc < 2) return api.WrongArity(ctx);
  ModuleRequest req;
  std::string error;
  if (!ParseModuleRequest(args, &req, &error)) {
    for (char& ch : error) {
      if (ch == '\r' || ch == '\n') ch = ' ';  // an error reply is one line
    }
    return api.ReplyWithError(ctx, ("ERR sluice: " + error).c_str());
  }
  RedisModuleString** keys = argv + 2;
  if (!KeysAreStrings(ctx, keys, req.checks.size())) {
    return api.ReplyWithError(ctx,
                              "WRONGTYPE Operation against a key holding the wrong kind of "
                              "value (sluice keys are strings)");
  }
  const Micros server_now = ServerNowMicros();
  std::vector<long long> reply;
  reply.reserve(req.checks.size());
  std::vector<ModuleWrite> writes;
  std::string copies[kMaxBatchChecks];
  StoredValue values[kMaxBatchChecks];
  for (const ModuleGroup& g : req.groups) {
    const std::size_t n = g.end - g.begin;
    ReadGroup(ctx, keys + g.begin, n, copies, values);
    writes.clear();
    const Micros now = req.caller_time ? req.checks[g.begin].now : server_now;
    DecideGroup(req, g, now, {values, n}, &writes, &reply);
    for (const ModuleWrite& w : writes) Write(ctx, keys[w.check], w);
  }
  api.ReplyWithArray(ctx, static_cast<long>(reply.size()));
  for (long long v : reply) api.ReplyWithLongLong(ctx, v);
  return kOk;
}

int DecideCommand(RedisModuleCtx* ctx, RedisModuleString** argv, int argc) {
  try {
    return Decide(ctx, argv, argc);
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
                  Resolve("RedisModule_Milliseconds", &api.Milliseconds);
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
  // getkeys-api: the keys are argv[2 .. 2 + numkeys) (Decide reports them).
  if (api.CreateCommand(ctx, "sluice.decide", DecideCommand, "write deny-oom getkeys-api", 0, 0,
                        0) != kOk) {
    return kErr;
  }
  if (api.CreateCommand(ctx, "sluice.version", VersionCommand, "readonly fast", 0, 0, 0) != kOk) {
    return kErr;
  }
  return kOk;
}
