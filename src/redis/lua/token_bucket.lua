-- Token bucket (algorithm 3), mirrors src/core/token_bucket.cc.
-- State: struct.pack('<Bddd', 3, expires, tokens, last).
DECIDE[3] = function(c, now)
  local capacity = c.cap
  local rate = c.limit / c.window
  -- With initial tokens below the capacity a bucket is new again only after a whole
  -- window at full, and a request starts a new one even if it is not committed
  -- (c.start, written by dispatch.lua; token_bucket.cc).
  local keep = 0
  if c.init >= 0 and c.init < capacity then keep = c.window end
  local tokens, t
  local found, stokens, slast = load(c, now)
  if not found then
    if c.init >= 0 then tokens = c.init else tokens = capacity end
    t = now
    if keep > 0 then
      local reset0 = 0
      if not (tokens + EPS >= capacity) then reset0 = ceil((capacity - tokens) / rate) end
      c.start_expires = t + reset0 + keep
      c.start = struct.pack('<Bddd', 3, c.start_expires, tokens, t)
    end
  else
    t = max(now, slast)
    tokens = min(capacity, stokens + (t - slast) * rate)
  end
  local need = max(c.cost, 1)
  local allowed = tokens + EPS >= need
  local retry = 0
  if allowed then
    tokens = max(0, tokens - c.cost)
  else
    retry = max(1, ceil((need - tokens) / rate))
  end
  local remaining = max(0, floor(tokens + EPS))
  local reset = 0
  if not (tokens + EPS >= capacity) then reset = ceil((capacity - tokens) / rate) end
  c.expires = t + reset + keep
  c.state = struct.pack('<Bddd', 3, c.expires, tokens, t)
  return allowed, remaining, reset, retry
end
COMMIT[3] = store_word
-- Refund: refill as a decision does, then add cost tokens, capped at the capacity
-- (src/core TokenBucketRefund).
REFUND[3] = function(c, now, cost)
  local found, stokens, slast = load(c, now)
  if not found then return end
  local capacity = c.cap
  local rate = c.limit / c.window
  local t = max(now, slast)
  local tokens = min(capacity, stokens + (t - slast) * rate)
  tokens = min(capacity, tokens + cost)
  local reset = 0
  if not (tokens + EPS >= capacity) then reset = ceil((capacity - tokens) / rate) end
  c.expires = t + reset
  if c.init >= 0 and c.init < capacity then c.expires = c.expires + c.window end
  c.state = struct.pack('<Bddd', 3, c.expires, tokens, t)
  store_word(c, now)
end
