// Internal: what `sluice check/peek/reset` and `sluice bench` share: the flags that
// describe a policy and a store, opening the store, and small output helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/clock.h"
#include "sluice/policy.h"
#include "sluice/redis_store.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::cli {

// Exit codes of the store commands (documented in docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitDenied = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitStoreError = 3;

// The policy flags as typed. Rate is empty when not given.
struct PolicyFlags {
  std::string algorithm = "sliding_window_counter";
  std::string rate;
  std::uint64_t burst = 0;
  std::string policy_name = "default";
};

// Adds --algorithm, --rate, --burst and --policy-name to `app`. `rate_help` says
// whether --rate is required for this command.
void AddPolicyFlags(CLI::App& app, PolicyFlags& flags, const std::string& rate_help);

// Builds and validates the policy. Errors name the flag, e.g. "--rate: rate 'x' must
// look like COUNT/UNIT". An empty rate becomes `default_rate`.
Result<Policy> BuildPolicy(const PolicyFlags& flags, std::string_view default_rate = {});

// The store flags as typed.
struct StoreFlags {
  std::string url = "redis://127.0.0.1:6379";
  std::string timeout = "1s";          // per call
  std::string connect_timeout = "1s";  // connecting, AUTH, SCRIPT LOAD
  int connections = 1;
  int coalesce = 32;  // RedisStoreOptions::coalesce (`sluice bench --coalesce`)
};

// Adds --redis (alias --store), --timeout and --connect-timeout to `app`.
void AddStoreFlags(CLI::App& app, StoreFlags& flags);

// An open store: `store` always; `redis` too when it is a RedisStore.
struct OpenedStore {
  std::shared_ptr<Store> store;
  std::shared_ptr<RedisStore> redis;
};

// Checks the durations (InvalidArgument naming the flag) and opens the store:
// memory:// for a fresh in-process store, redis:// or unix:// for Redis. Connection
// errors (refused, wrong password, not a Redis server) keep the store's message.
// `usage_error` is set when the flags themselves are wrong (not the store).
Result<OpenedStore> OpenStoreFromFlags(const StoreFlags& flags, bool* usage_error);

// Parses a duration flag that must be more than 0. Errors name the flag and say what
// is wrong: "--timeout must be more than 0, not '0'", "... not '-5ms'", or the parser's
// message ("needs a unit") for anything else.
Result<Micros> ParsePositiveDuration(std::string_view flag, std::string_view text);

// A wait, rounded for reading: "0s", "850us", "250ms", "59.2s", "12m 3s", "1h 2m".
std::string FormatWait(Micros us);

// "100 per 1m" or "20 per 1s, burst 50".
std::string DescribeLimit(const Policy& p);

// A JSON string literal (quotes included) with the required escapes. A key is bytes,
// JSON text is UTF-8: each byte that does not belong to a well-formed UTF-8 sequence
// becomes \ufffd (U+FFFD), so the output is always valid JSON.
std::string JsonString(std::string_view s);

}  // namespace sluice::cli
