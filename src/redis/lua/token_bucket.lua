-- Token bucket (algorithm 3), mirrors src/core/token_bucket.cc. The one source of its
-- decision (see fixed_window.lua).
-- State: struct.pack('<Bddd', 3, expires, tokens, last). Carry-over: '<Bdddddd' adds
-- the limit, window and capacity (fixed_window.lua); p refills at the old rate and
-- scales the tokens by new / old capacity.
-- A check alone in its call or group (`solo`) with a cost, of a bucket that starts full,
-- writes first, as gcra.lua does: `SET key <the full bucket less the cost> PX .. GET` is
-- the whole decision when the key is fresh (absent or back to full: a bucket under its
-- rate expires when it is full again); otherwise it decides on what GET returned and
-- writes again. `tried`: the caller made that SET already (lean_bucket.lua), and it
-- replaced this state.
local rate = limit / w
local raw, guess = false, false
if solo and not mode and init < 0 and cost > 0 then
  local gt = max(0, cap - cost)
  local gr = 0
  if not (gt + EPS >= cap) then gr = ceil((cap - gt) / rate) end
  guess = struct.pack('<Bddd', 3, now + gr, gt, now)
  local ms = max(1, ceil(gr / 1000)) + PAD
  --@WRITE_FIRST@
else
  raw = redis.call('GET', key) -- the state, or false
end
-- With initial tokens below the capacity a bucket is new again only after a whole
-- window at full, and a request on a new bucket starts it even when it is not
-- committed (`start`; token_bucket.cc).
local keep = 0
if init >= 0 and init < cap then keep = w end
local tokens, t
local _, e, stokens, slast
if raw and #raw == 25 and string.byte(raw) == 3 then
  _, e, stokens, slast = struct.unpack('<Bddd', raw)
elseif raw and #raw == 49 and string.byte(raw) == 3 then
  -- written with its parameters (carry-over: see fixed_window.lua)
  local ol, ow, oc
  _, e, stokens, slast, ol, ow, oc = struct.unpack('<Bdddddd', raw)
  if mode and (ol ~= limit or ow ~= w or oc ~= cap) and e > now then
    if mode == 'p' then
      -- refilled at the old rate, then scaled by the capacities (src/core/carry.cc)
      local t0
      stokens, t0 = refill(stokens, slast, now, oc, ol / ow)
      stokens = stokens * cap / oc
      slast = t0
      -- new again under the new parameters? (TokenBucketIsNew)
      local tf = 0
      if not (stokens + EPS >= cap) then tf = ceil((cap - stokens) / rate) end
      e = slast + tf + keep
    else
      e = nil
    end
  end
end
if not (e and e > now) then
  if init >= 0 then tokens = init else tokens = cap end
  t = now
  if keep > 0 and cost > 0 then
    local to_full = 0
    if not (tokens + EPS >= cap) then to_full = ceil((cap - tokens) / rate) end
    start_expires = t + to_full + keep
    if mode then
      start = struct.pack('<Bdddddd', 3, start_expires, tokens, t, limit, w, cap)
    else
      start = struct.pack('<Bddd', 3, start_expires, tokens, t)
    end
  end
else
  tokens, t = refill(stokens, slast, now, cap, rate)
end
allowed = tokens + EPS >= need
retry = 0
if allowed then
  tokens = max(0, tokens - cost)
else
  retry = max(1, ceil((need - tokens) / rate))
  -- Reservation (issue #12; `mw` = max_wait in us, 0: none):
  -- allowed when the request could pass within max_wait; its tokens are taken now
  -- (they go negative). Its wait is answered as a negative retry (redis/reply.cc).
  if mw > 0 and cost > 0 and retry <= mw then
    allowed = true
    tokens = tokens - cost
    retry = -retry
  end
end
remaining = max(0, floor(tokens + EPS))
reset = 0
if not (tokens + EPS >= cap) then reset = ceil((cap - tokens) / rate) end
expires = t + reset + keep
if allowed and cost > 0 then
  if mode then
    state = struct.pack('<Bdddddd', 3, expires, tokens, t, limit, w, cap)
  else
    state = struct.pack('<Bddd', 3, expires, tokens, t)
  end
  if guess and state == guess then state = nil end -- written already
elseif guess then
  local old_e = e and e > now and e
  --@PUT_BACK@
end
--@NORMALISED@ tokens, t
--@OPERATIONS@ (the batch script only, after DECIDE[3]: embed_lua.cmake)

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

-- Penalty (FORCE, prelude.lua): the state normalised by the decision itself
-- (word_state.lua, normalised), then the cost added up to the bound.
FORCE[3] = function(c, now)
  local tokens, t = normalised(c, now)
  local cap, rate = c.cap, c.limit / c.window
  local was = tokens
  tokens = max(min(tokens, cap - c.bound), tokens - c.cost)
  local reset = 0
  if not (tokens + EPS >= cap) then reset = ceil((cap - tokens) / rate) end
  c.expires = t + reset
  if c.init >= 0 and c.init < cap then c.expires = c.expires + c.window end
  c.state, c.patch = struct.pack('<Bddd', 3, c.expires, tokens, t), nil
  store_word(c, now)
  return charged_units(was - tokens)
end
