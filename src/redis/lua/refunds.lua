-- Refunds of the O(1) algorithms (batch script only: a refund is one call of the batch
-- script, see runner.lua), each mirroring src/core's <Algorithm>Refund. The sliding
-- log's is in sliding_window_log.lua.

-- Refund: the current window's count goes down by cost (not below 0); a state of an
-- earlier window is left alone (src/core FixedWindowRefund).
REFUND[0] = function(c, now, cost)
  local raw = redis.call('GET', c.key)
  local n = raw and tonumber(raw)
  if n and n >= 4503599627370496 then -- the counter (fixed_window.lua)
    local count = counter_count(n, floor_to(now, c.window), c.window)
    if count and count > 0 then
      local give = min(count, cost)
      -- (INCRBY keeps the TTL; SET KEEPTTL where an older ACL line refuses it)
      if type(redis.pcall('INCRBY', c.key, -give)) ~= 'number' then
        redis.call('SET', c.key, n - give, 'KEEPTTL')
      end
    end
    return
  end
  local found, sws, scount = load(c, now, raw or false)
  if not found or sws < floor_to(now, c.window) then return end
  c.expires = sws + c.window
  c.state = pack_word(c, sws, scount - min(scount, cost))
  store_word(c, now)
end

-- Refund: the current window's count goes down by cost (not below 0); once the
-- window has rolled over, nothing changes (src/core SlidingWindowCounterRefund).
REFUND[2] = function(c, now, cost)
  local found, sws, scurr, sprev = load(c, now)
  if not found or sws < floor_to(now, c.window) then return end
  local curr = scurr - min(scurr, cost)
  if curr > 0 then c.expires = sws + 2 * c.window else c.expires = sws + c.window end
  c.state = pack_word(c, sws, curr, sprev)
  store_word(c, now)
end

-- Refund: refill as a decision does, then add cost tokens, capped at the capacity
-- (src/core TokenBucketRefund).
REFUND[3] = function(c, now, cost)
  local found, stokens, slast = load(c, now)
  if not found then return end
  local capacity = c.cap
  local rate = c.limit / c.window
  local tokens, t = refill(stokens, slast, now, capacity, rate)
  tokens = min(capacity, tokens + cost)
  local reset = 0
  if not (tokens + EPS >= capacity) then reset = ceil((capacity - tokens) / rate) end
  c.expires = t + reset
  if c.init >= 0 and c.init < capacity then c.expires = c.expires + c.window end
  c.state = pack_word(c, tokens, t)
  store_word(c, now)
end

-- Refund: the TAT moves back by cost emission intervals, never below now
-- (src/core GcraRefund). The state is the TAT as a plain number (gcra.lua); the
-- layout before (struct '<Bdd') is still read.
REFUND[4] = function(c, now, cost)
  local raw = redis.call('GET', c.key)
  local stat = raw and tonumber(raw)
  if stat then
    if not (ceil(stat) > now) then return end
    c.carry = false
  else
    local found, otat = load(c, now)
    if not found then return end
    stat = otat
  end
  local tat = max(now, stat - cost * (c.window / c.limit))
  c.expires = ceil(tat)
  c.state = tat
  if c.carry then c.state = pack_word(c, tat) end
  store_word(c, now)
end
