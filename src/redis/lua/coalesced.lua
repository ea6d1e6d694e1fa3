-- sluice: a coalesced call, several callers' independent check groups in ONE script
-- call (docs/redis.md, "Coalesced calls"). Built by embed_lua.cmake as clock + prelude +
-- every algorithm's DECIDE/COMMIT + refunds + this file (no dispatch.lua).
--
-- A connection's I/O thread merges the one-call EVALSHAs that callers queued at the same
-- time (src/redis/connection.cc); each group is exactly the KEYS and ARGV its own call
-- would have sent (dispatch.lua's layout), behind a count:
-- KEYS: every group's keys, group after group (two per sliding log check).
-- ARGV[1]: "" (clock.lua reads Redis's TIME once for the whole call). Then per group:
--   n (its checks), its clock ("" for Redis's TIME, or the caller's now in us: tests
--   only), its extra TTL in ms, then 6 numbers per check as in dispatch.lua
--   (algorithm, limit, window, capacity, initial tokens, cost >= 0: no refunds here).
-- Returns one array per group, in order: the 4 integers per check dispatch.lua returns.
--
-- Each group is decided and committed before the next one is read, all or nothing
-- within the group and independent of the others: exactly what the same calls would
-- have done one after the other, in this order (the sliding log's `logs` table carries
-- a key's state from group to group, as it does between checks of one batch).
local results = {}
local redis_now = now
local k, a = 1, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local gnow = redis_now
  if ARGV[a + 1] ~= '' then gnow = tonumber(ARGV[a + 1]) end
  PAD = tonumber(ARGV[a + 2])
  a = a + 3
  local checks, out = {}, {}
  local all, consumes = true, false
  for _ = 1, n do
    local c = {
      alg = tonumber(ARGV[a]), limit = tonumber(ARGV[a + 1]), window = tonumber(ARGV[a + 2]),
      cap = tonumber(ARGV[a + 3]), init = tonumber(ARGV[a + 4]), cost = tonumber(ARGV[a + 5]),
      key = KEYS[k],
    }
    k = k + 1
    if c.alg == 1 then
      c.key2 = KEYS[k]
      k = k + 1
    end
    local decide = DECIDE[c.alg]
    if not decide then return redis.error_reply('sluice: unknown algorithm ' .. ARGV[a]) end
    if c.cost < 0 then return redis.error_reply('sluice: a refund in a coalesced call') end
    a = a + 6
    local allowed, remaining, reset, retry = decide(c, gnow)
    checks[#checks + 1] = c
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = reset
    out[#out + 1] = retry
    all = all and allowed
    consumes = consumes or c.cost > 0
  end
  if all and consumes then
    for _, c in ipairs(checks) do
      if c.cost > 0 then COMMIT[c.alg](c, gnow) end
    end
  else
    -- as dispatch.lua: a new token bucket with initial tokens below its capacity starts
    for _, c in ipairs(checks) do
      if c.start and c.cost > 0 then
        redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, gnow)))
      end
    end
  end
  results[#results + 1] = out
end
flush_logs()
return results
