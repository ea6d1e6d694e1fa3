-- Token bucket, one check (see token_bucket.lua).
-- State: struct.pack('<Bddd', 3, expires, tokens, last).
local capacity, init = tonumber(ARGV[6]), tonumber(ARGV[7])
local rate = limit / w
-- With initial tokens below the capacity a bucket is new again only after a whole
-- window at full, and a denied request starts a new one too (token_bucket.cc).
local keep = 0
if init >= 0 and init < capacity then keep = w end
local tokens, t
local _, e, stokens, slast
if raw and #raw == 25 and string.byte(raw) == 3 then
  _, e, stokens, slast = struct.unpack('<Bddd', raw)
end
local fresh = not (e and e > now)
if fresh then
  if init >= 0 then tokens = init else tokens = capacity end
  t = now
else
  t = max(now, slast)
  tokens = min(capacity, stokens + (t - slast) * rate)
end
local allowed = tokens + EPS >= need
local retry = 0
if allowed then
  tokens = max(0, tokens - cost)
else
  retry = max(1, ceil((need - tokens) / rate))
end
local remaining = max(0, floor(tokens + EPS))
local reset = 0
if not (tokens + EPS >= capacity) then reset = ceil((capacity - tokens) / rate) end
if cost > 0 and (allowed or (fresh and keep > 0)) then
  store(struct.pack('<Bddd', 3, t + reset + keep, tokens, t), t + reset + keep)
end
return {allowed and 1 or 0, remaining, reset, retry}
