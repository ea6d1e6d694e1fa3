-- Concurrency limit (algorithm 5, issue #12 item 1), mirrors src/core/concurrency.cc.
-- One key per check: a sorted set of the held permits' ids (32 hex characters, made by
-- the client) scored by their expiry in microseconds on the script's clock (Redis's
-- TIME, so every client agrees). Its TTL covers the last expiry (permits_expire): a set
-- nobody touches goes by itself once every permit in it has expired, and never while
-- one is held, whatever lease each permit was taken or extended with (a shorter lease
-- under the same policy name must not drop permits held under a longer one). The
-- check's kind (runner.lua) gives c.permit, the permit id, and c.op: a (acquire, also
-- a peek at cost 0), r (release), x (extend). A concurrency check runs in this batch
-- script (or the one-check script that is its body), never in a lean one-check script.
-- Every op first drops the permits that expired by now (score <= now), so a decision
-- reads only live permits, by score, whatever the key's TTL.
-- Work per call is bounded, whatever the number held: ZREMRANGEBYSCORE is O(log n) plus
-- the permits it removes (each removed once: amortised), ZCARD O(1), ZADD, ZREM and
-- ZRANGE of one rank O(log n), PEXPIRE O(1).

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

-- Makes the key's TTL cover a permit that now expires at e (us), without shortening
-- it: `held` is the number of live permits before this one was added (0: ZADD has just
-- created the key, with no TTL yet). PEXPIRE GT is Redis >= 7.0; before, the TTL is
-- taken from the last expiry in the set.
local function permits_expire(c, now, e, held)
  local ms = int(ttl_ms(e, now))
  if held == 0 then
    redis.call('PEXPIRE', c.key, ms)
  elseif type(redis.pcall('PEXPIRE', c.key, ms, 'GT')) ~= 'number' then
    local last = redis.call('ZRANGE', c.key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', c.key, int(ttl_ms(tonumber(last[2]), now)))
  end
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
      permits_expire(c, now, e, held)
    end
    return found, permits_free(limit, held), permits_reset(c, now, held), 0
  end
  if held + 1 > limit then
    -- the (held + 1 - limit)-th earliest expiry frees the first slot
    local first = redis.call('ZRANGE', c.key, int(held - limit), int(held - limit), 'WITHSCORES')
    return false, permits_free(limit, held), permits_reset(c, now, held), tonumber(first[2]) - now
  end
  if c.cost == 0 then return true, limit - held, permits_reset(c, now, held), 0 end
  -- the state after this acquire, committed with the batch: the last permit to expire
  -- is this one, or one held under a longer lease (src/core/concurrency.cc)
  c.held = held
  local reset = c.window
  if held > 0 then reset = max(reset, permits_reset(c, now, held)) end
  return true, limit - held - 1, reset, 0
end

COMMIT[5] = function(c, now)
  if (c.op or 'a') ~= 'a' then return end
  local e = now + c.window
  redis.call('ZADD', c.key, int(e), c.permit)
  permits_expire(c, now, e, c.held)
end

-- A permit is given back by releasing it (DECIDE with e=r), never by a refund.
REFUND[5] = function(c, now, cost) end
