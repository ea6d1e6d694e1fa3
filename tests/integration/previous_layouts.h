// The states' layouts before their current ones (docs/redis.md, "Key layout"), for the
// tests that hold a rolling upgrade to the in-process store: what a server of the
// previous version would have left at a key.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "redis_server.h"
#include "sluice/clock.h"

namespace sluice::testing {

// Rewrites the counter of the window starting at `window_start` (of length `window`)
// at `key` as struct.pack('<Bddd', 0, expires, window start, count), with the same TTL.
// Returns whether it did (false: the key holds no counter of that window).
inline bool DowngradeFixedWindow(const RedisServer& server, const std::string& key,
                                 Micros window_start, Micros window) {
  static const char* kScript =
      "local n = tonumber(redis.call('GET', KEYS[1]) or '') if not n or n < 2^52 then return 0 end "
      "local ws, w = tonumber(ARGV[1]), tonumber(ARGV[2]) "
      "local tag = 2^20 + (ws / w) % 2^20 local otag = math.floor(n / 2^32) "
      "if otag ~= tag then return 0 end local ttl = redis.call('PTTL', KEYS[1]) "
      "redis.call('SET', KEYS[1], struct.pack('<Bddd', 0, ws + w, ws, n - otag * 2^32), 'PX', "
      "ttl) return 1";
  auto r = server.Command(
      {"EVAL", kScript, "1", key, std::to_string(window_start), std::to_string(window)});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return false;
  EXPECT_NE(r->type, REDIS_REPLY_ERROR) << r->str;
  return r->integer == 1;
}

// Rewrites the GCRA state at `key` (its TAT as a plain number, issue #9) as
// struct.pack('<Bdd', 4, expires, tat), with the same TTL. Returns whether it did
// (false: no key).
inline bool DowngradeGcra(const RedisServer& server, const std::string& key) {
  static const char* kScript =
      "local raw = redis.call('GET', KEYS[1]) if not raw then return 0 end "
      "local tat = tonumber(raw) if not tat then return 0 end "
      "local ttl = redis.call('PTTL', KEYS[1]) "
      "redis.call('SET', KEYS[1], struct.pack('<Bdd', 4, math.ceil(tat), tat), 'PX', ttl) "
      "return 1";
  auto r = server.Command({"EVAL", kScript, "1", key});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return false;
  EXPECT_NE(r->type, REDIS_REPLY_ERROR) << r->str;
  return r->integer == 1;
}

}  // namespace sluice::testing
