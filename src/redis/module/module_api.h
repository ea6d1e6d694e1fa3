// Internal: the part of the Redis Module API that sluice's module uses, declared here
// (not a copy of redismodule.h): the opaque types, the constants and the functions it
// calls, each a pointer that ModuleApiInit fills by name through RedisModule_GetApi, the
// lookup function Redis passes as the first word of the context given to
// RedisModule_OnLoad (that is what redismodule.h's RedisModule_Init does too). Facts
// from the Redis Module API reference (redis.io, "Modules API reference").
#pragma once

#include <cstddef>

extern "C" {

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx* ctx, RedisModuleString** argv, int argc);
}

namespace sluice::redis_module {

inline constexpr int kOk = 0;   // REDISMODULE_OK
inline constexpr int kErr = 1;  // REDISMODULE_ERR
inline constexpr int kApiVersion1 = 1;
inline constexpr int kRead = 1 << 0;   // REDISMODULE_READ
inline constexpr int kWrite = 1 << 1;  // REDISMODULE_WRITE
inline constexpr int kKeyTypeEmpty = 0;
inline constexpr int kKeyTypeString = 1;
inline constexpr int kKeyTypeZset = 5;
// RedisModule_ZsetAdd's flags: in, XX; out, what it did.
inline constexpr int kZaddXx = 1 << 0;
inline constexpr int kZaddAdded = 1 << 2;
inline constexpr int kZaddUpdated = 1 << 3;
inline constexpr int kReplyString = 0;   // REDISMODULE_REPLY_STRING
inline constexpr int kReplyInteger = 2;  // REDISMODULE_REPLY_INTEGER
inline constexpr int kReplyArray = 3;    // REDISMODULE_REPLY_ARRAY
inline constexpr int kReplyNull = 4;     // REDISMODULE_REPLY_NULL

// The functions, resolved at load. Those marked optional may stay null (an older
// server): the callers check.
struct ModuleApi {
  int (*GetApi)(const char* name, void* out) = nullptr;
  void (*SetModuleAttribs)(RedisModuleCtx* ctx, const char* name, int ver, int apiver) = nullptr;
  int (*IsModuleNameBusy)(const char* name) = nullptr;  // optional (4.0.3)
  int (*CreateCommand)(RedisModuleCtx* ctx, const char* name, RedisModuleCmdFunc f,
                       const char* flags, int firstkey, int lastkey, int keystep) = nullptr;
  int (*IsKeysPositionRequest)(RedisModuleCtx* ctx) = nullptr;
  void (*KeyAtPos)(RedisModuleCtx* ctx, int pos) = nullptr;
  int (*WrongArity)(RedisModuleCtx* ctx) = nullptr;
  int (*ReplyWithError)(RedisModuleCtx* ctx, const char* err) = nullptr;
  int (*ReplyWithLongLong)(RedisModuleCtx* ctx, long long v) = nullptr;
  int (*ReplyWithArray)(RedisModuleCtx* ctx, long len) = nullptr;
  const char* (*StringPtrLen)(const RedisModuleString* s, std::size_t* len) = nullptr;
  RedisModuleKey* (*OpenKey)(RedisModuleCtx* ctx, RedisModuleString* name, int mode) = nullptr;
  void (*CloseKey)(RedisModuleKey* key) = nullptr;
  int (*KeyType)(RedisModuleKey* key) = nullptr;
  char* (*StringDMA)(RedisModuleKey* key, std::size_t* len, int mode) = nullptr;
  int (*StringTruncate)(RedisModuleKey* key, std::size_t len) = nullptr;
  int (*SetAbsExpire)(RedisModuleKey* key, long long unix_ms) = nullptr;  // 6.2.2
  int (*Replicate)(RedisModuleCtx* ctx, const char* cmd, const char* fmt, ...) = nullptr;
  RedisModuleString* (*CreateString)(RedisModuleCtx* ctx, const char* ptr,
                                     std::size_t len) = nullptr;
  void (*FreeString)(RedisModuleCtx* ctx, RedisModuleString* str) = nullptr;
  // A command run from the module (a sliding log's sorted set: "v", an array of strings;
  // "!v": replicated, as a script's write is), and its reply.
  RedisModuleCallReply* (*Call)(RedisModuleCtx* ctx, const char* cmd, const char* fmt,
                                ...) = nullptr;
  int (*CallReplyType)(RedisModuleCallReply* reply) = nullptr;
  std::size_t (*CallReplyLength)(RedisModuleCallReply* reply) = nullptr;
  RedisModuleCallReply* (*CallReplyArrayElement)(RedisModuleCallReply* reply,
                                                 std::size_t i) = nullptr;
  const char* (*CallReplyStringPtr)(RedisModuleCallReply* reply, std::size_t* len) = nullptr;
  long long (*CallReplyInteger)(RedisModuleCallReply* reply) = nullptr;
  void (*FreeCallReply)(RedisModuleCallReply* reply) = nullptr;
  long long (*Microseconds)() = nullptr;  // optional (7.2): else gettimeofday, as TIME
  // Sorted sets (redis_sets.cc: a permit set's commands without RedisModule_Call). A
  // range is walked from ZsetFirstInScoreRange / ZsetLastInScoreRange (min, max, and
  // whether each is excluded) and ended by ZsetRangeStop; a current element is a new
  // string, freed by the caller.
  std::size_t (*ValueLength)(RedisModuleKey* key) = nullptr;
  int (*ZsetAdd)(RedisModuleKey* key, double score, RedisModuleString* ele, int* flags) = nullptr;
  int (*ZsetRem)(RedisModuleKey* key, RedisModuleString* ele, int* deleted) = nullptr;
  int (*ZsetScore)(RedisModuleKey* key, RedisModuleString* ele, double* score) = nullptr;
  int (*ZsetFirstInScoreRange)(RedisModuleKey* key, double min, double max, int minex,
                               int maxex) = nullptr;
  int (*ZsetLastInScoreRange)(RedisModuleKey* key, double min, double max, int minex,
                              int maxex) = nullptr;
  RedisModuleString* (*ZsetRangeCurrentElement)(RedisModuleKey* key, double* score) = nullptr;
  int (*ZsetRangeEndReached)(RedisModuleKey* key) = nullptr;
  void (*ZsetRangeStop)(RedisModuleKey* key) = nullptr;
};

// The resolved functions (filled by ModuleApiInit).
extern ModuleApi api;

// Resolves every function from the context Redis passes to RedisModule_OnLoad and
// registers the module's name; kErr when a required one is missing (the server is too
// old: the module then refuses to load) or the name is taken.
int ModuleApiInit(RedisModuleCtx* ctx, const char* name, int version);

}  // namespace sluice::redis_module
