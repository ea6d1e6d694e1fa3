-- The batch. KEYS: one key per check (two for a sliding window log: state, entries).
-- ARGV[1]: "" to use Redis's clock (TIME), or the caller's now in microseconds
-- (tests only). ARGV[2]: extra TTL in ms (0; caller-time mode pads TTLs so that
-- Redis's own expiry, on its clock, cannot drop state the caller's clock still needs).
-- Then seven arguments per check: algorithm, limit, window (us), capacity,
-- initial tokens (-1: full), cost (0: peek; negative: a refund of -cost), and the
-- check's extensions ("" for a plain check; prelude.lua's parse_ext, read as `c.x`).
-- Returns four integers per check: allowed (1/0), remaining, reset_after, retry_after;
-- for a refund (every cost negative, Store::Refund) nothing: an empty array.
-- `now` comes from clock.lua, which every script starts with.
PAD = tonumber(ARGV[2])

local checks, out = {}, {}
local all, consumes = true, false
local k = 1
for i = 0, (#ARGV - 2) / 7 - 1 do
  local b = 2 + i * 7
  local c = {
    alg = tonumber(ARGV[b + 1]), limit = tonumber(ARGV[b + 2]), window = tonumber(ARGV[b + 3]),
    cap = tonumber(ARGV[b + 4]), init = tonumber(ARGV[b + 5]), cost = tonumber(ARGV[b + 6]),
    x = parse_ext(ARGV[b + 7]), key = KEYS[k],
  }
  k = k + 1
  if c.alg == 1 then
    c.key2 = KEYS[k]
    k = k + 1
  end
  local decide = DECIDE[c.alg]
  if not decide then return redis.error_reply('sluice: unknown algorithm ' .. ARGV[b + 1]) end
  if c.cost < 0 then
    REFUND[c.alg](c, now, -c.cost)
  else
    local allowed, remaining, reset, retry = decide(c, now)
    checks[#checks + 1] = c
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = reset
    out[#out + 1] = retry
    -- (c.solo: a permit's release or extend, applied on its own: lua/concurrency.lua)
    if not c.solo then
      all = all and allowed
      consumes = consumes or c.cost > 0
    end
  end
end

if all and consumes then
  for _, c in ipairs(checks) do
    if c.cost > 0 then COMMIT[c.alg](c, now) end
  end
else
  -- Not committed: a new token bucket with initial tokens below its capacity starts
  -- anyway (token_bucket.lua's c.start; src/core/token_bucket.cc).
  for _, c in ipairs(checks) do
    if c.start and c.cost > 0 then
      redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, now)))
    end
  end
end
flush_logs()
return out
