-- Token bucket (algorithm 3), mirrors src/core/token_bucket.cc. The one source of its
-- decision (see fixed_window.lua).
-- State: struct.pack('<Bddd', 3, expires, tokens, last).
local rate = limit / w
-- With initial tokens below the capacity a bucket is new again only after a whole
-- window at full, and a request on a new bucket starts it even when it is not
-- committed (`start`; token_bucket.cc).
local keep = 0
if init >= 0 and init < cap then keep = w end
local tokens, t
local _, e, stokens, slast
if raw and #raw == 25 and string.byte(raw) == 3 then
  _, e, stokens, slast = struct.unpack('<Bddd', raw)
end
if not (e and e > now) then
  if init >= 0 then tokens = init else tokens = cap end
  t = now
  if keep > 0 and cost > 0 then
    local to_full = 0
    if not (tokens + EPS >= cap) then to_full = ceil((cap - tokens) / rate) end
    start_expires = t + to_full + keep
    start = struct.pack('<Bddd', 3, start_expires, tokens, t)
  end
else
  t = max(now, slast)
  tokens = min(cap, stokens + (t - slast) * rate)
end
allowed = tokens + EPS >= need
retry = 0
if allowed then
  tokens = max(0, tokens - cost)
else
  retry = max(1, ceil((need - tokens) / rate))
  -- Reservation (issue #12; ext item w = max_wait in us, `x` the check's ext table):
  -- allowed when the request could pass within max_wait; its tokens are taken now
  -- (they go negative). Its wait is answered as a negative retry (redis/reply.cc).
  local mw = x and tonumber(x.w) or 0
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
if allowed and cost > 0 then state = struct.pack('<Bddd', 3, expires, tokens, t) end
