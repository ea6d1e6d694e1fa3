-- sluice: a coalesced call, several callers' independent check batches in ONE script
-- call (docs/redis.md, "Coalesced calls"). Built by embed_lua.cmake as clock + prelude +
-- every algorithm's DECIDE/COMMIT + refunds + this file (no dispatch.lua).
--
-- A connection's I/O thread merges the calls that callers queued at the same time
-- (src/redis/connection.cc); the store encodes them (redis_store.cc, EncodeCoalesced)
-- compactly, since each argument costs Redis a string to build and parse:
-- KEYS: every batch's keys, batch after batch (two per sliding log check).
-- ARGV[1]: "" (every batch on Redis's TIME, read once) or "c" (each batch starts with
--   its caller's now in us: caller-time mode, tests only). ARGV[2]: extra TTL in ms.
-- ARGV[3]: P, the distinct policies of the call, then 5 numbers for each: algorithm,
--   limit, window (us), capacity, initial tokens (-1: full).
-- Then one number per check: (cost * 4096 + policy) * 2 + last, where policy indexes
--   the list above from 0 and last is 1 on the last check of its batch (cost >= 0:
--   no refunds here).
-- Returns one flat array: the 4 integers per check of dispatch.lua, batch after batch
-- (the connection hands each caller its part).
--
-- Each batch is decided and committed before the next one is read, all or nothing
-- within the batch and independent of the others: exactly what the same calls would
-- have done one after the other, in this order (the sliding log's `logs` table carries
-- a key's state from batch to batch, as it does between checks of one batch).
PAD = tonumber(ARGV[2])
local np = tonumber(ARGV[3])
local pol = {}
for i = 0, np - 1 do
  local b = 4 + 5 * i
  pol[i] = {tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
            tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])}
end
local caller_time = ARGV[1] ~= ''
local out, n = {}, 0
local checks = {}
local a, k, nargs = 4 + 5 * np, 1, #ARGV
while a <= nargs do
  local gnow = now
  if caller_time then
    gnow = tonumber(ARGV[a])
    a = a + 1
  end
  local nc, all, consumes, last = 0, true, false, 0
  repeat
    local v = tonumber(ARGV[a])
    a = a + 1
    last = v % 2
    v = (v - last) / 2
    local pi = v % 4096
    local p = pol[pi]
    local c = {alg = p[1], limit = p[2], window = p[3], cap = p[4], init = p[5],
               cost = (v - pi) / 4096, key = KEYS[k]}
    k = k + 1
    if c.alg == 1 then
      c.key2 = KEYS[k]
      k = k + 1
    end
    local decide = DECIDE[c.alg]
    if not decide then return redis.error_reply('sluice: unknown algorithm ' .. c.alg) end
    local allowed, remaining, reset, retry = decide(c, gnow)
    nc = nc + 1
    checks[nc] = c
    out[n + 1] = allowed and 1 or 0
    out[n + 2] = remaining
    out[n + 3] = reset
    out[n + 4] = retry
    n = n + 4
    all = all and allowed
    consumes = consumes or c.cost > 0
  until last == 1
  if all and consumes then
    for i = 1, nc do
      local c = checks[i]
      if c.cost > 0 then COMMIT[c.alg](c, gnow) end
    end
  else
    -- as dispatch.lua: a new token bucket with initial tokens below its capacity starts
    for i = 1, nc do
      local c = checks[i]
      if c.start and c.cost > 0 then
        redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, gnow)))
      end
    end
  end
end
flush_logs()
return out
