-- Concurrency limit (algorithm 5, issue #12 item 1), mirrors src/core/concurrency.cc.
-- One key per check: a sorted set of the held permits' ids (32 hex characters, made by
-- the client) scored by their expiry in microseconds on the script's clock (Redis's
-- TIME, so every client agrees). Its TTL is the last expiry's: a set nobody touches
-- goes by itself once every permit in it has expired. The check's kind (runner.lua) gives
-- c.permit, the permit id, and c.op: a (acquire, also a peek at cost 0), r (release),
-- x (extend). A concurrency check runs in this batch script (or the one-check script
-- that is its body), never in a lean one-check script.
-- Every op first drops the permits that expired by now (score <= now).

-- Held permits after the expired ones are dropped.
local function permits_trim(c, now)
  redis.call('ZREMRANGEBYSCORE', c.key, '-inf', int(now))
  return redis.call('ZCARD', c.key)
end

-- reset_after: until the last held permit expires (0 when none is held).
local function permits_reset(c, now, held)
  if held == 0 then return 0 end
  local last = redis.call('ZRANGE', c.key, -1, -1, 'WITHSCORES')
  return tonumber(last[2]) - now
end

local function permits_free(limit, held)
  if limit > held then return limit - held end
  return 0
end

DECIDE[5] = function(c, now)
  local op = c.op or 'a'
  local held = permits_trim(c, now)
  local limit = c.limit
  if op == 'r' or op == 'x' then
    -- applied now, whatever the batch decides (runner.lua leaves c.solo checks out
    -- of the all-or-nothing)
    c.solo = true
    local found = false
    if op == 'r' then
      found = redis.call('ZREM', c.key, c.permit) == 1
      if found then held = held - 1 end
    elseif redis.call('ZADD', c.key, 'XX', 'INCR', 0, c.permit) then
      -- (XX INCR 0: the score when held, nil when not; no command beyond the ACL's)
      found = true
      local e = now + c.window
      redis.call('ZADD', c.key, 'XX', int(e), c.permit)
      redis.call('PEXPIRE', c.key, int(ttl_ms(e, now))) -- e is now the last expiry
    end
    return found, permits_free(limit, held), permits_reset(c, now, held), 0
  end
  if held + 1 > limit then
    -- the (held + 1 - limit)-th earliest expiry frees the first slot
    local first = redis.call('ZRANGE', c.key, int(held - limit), int(held - limit), 'WITHSCORES')
    return false, permits_free(limit, held), permits_reset(c, now, held), tonumber(first[2]) - now
  end
  if c.cost == 0 then return true, limit - held, permits_reset(c, now, held), 0 end
  -- the state after this acquire, committed with the batch
  return true, limit - held - 1, c.window, 0
end

COMMIT[5] = function(c, now)
  if (c.op or 'a') ~= 'a' then return end
  local e = now + c.window
  redis.call('ZADD', c.key, int(e), c.permit)
  redis.call('PEXPIRE', c.key, int(ttl_ms(e, now)))
end

-- A permit is given back by releasing it (DECIDE with e=r), never by a refund.
REFUND[5] = function(c, now, cost) end
