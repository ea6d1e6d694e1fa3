// Internal: the sorted sets of a module call in Redis (sorted_sets.h's interface: a
// sliding window log's ":log" key, a concurrency limit's permit set). The commands a
// permit operation runs, the most frequent ones, are done through the Module API's
// sorted-set functions, without RedisModule_Call's cost (a client, the command's lookup,
// its timing and statistics, a reply built and read back), and replicated as the script's
// effects are; every other command goes through RedisModule_Call with "!". Either way a
// key of another type fails the call as a script's redis.call fails.
#pragma once

#include <string>

#include "redis/module/module_api.h"
#include "redis/module/sorted_sets.h"

namespace sluice::redis_module {

class RedisSets final : public SortedSets {
 public:
  // `names`: the call's keys; `now_ms`: the call's time on Redis's clock (a PEXPIRE's
  // expiry is replicated as PEXPIREAT of it plus the TTL, as Redis rewrites it).
  RedisSets(RedisModuleCtx* ctx, RedisModuleString** names, long long now_ms)
      : ctx_(ctx), names_(names), now_ms_(now_ms) {}

  bool Run(const char* command, std::uint32_t key, std::span<const std::string_view> args,
           bool write, SetReply* out) override;
  void Fail(std::string why) override {
    if (error_.empty()) error_ = std::move(why);
  }
  // Why the call failed, or empty.
  const std::string& error() const { return error_; }

 private:
  // The command through RedisModule_Call.
  bool Call(const char* command, std::uint32_t key, std::span<const std::string_view> args,
            bool write, SetReply* out);
  // The command through the sorted-set API; false when it is not one done so (then
  // Call runs it).
  bool Native(const char* command, std::uint32_t key, std::span<const std::string_view> args,
              SetReply* out);

  RedisModuleCtx* ctx_;
  RedisModuleString** names_;
  long long now_ms_;
  std::string error_;
};

}  // namespace sluice::redis_module
