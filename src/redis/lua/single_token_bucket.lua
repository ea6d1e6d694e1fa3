-- Token bucket, one check (see token_bucket.lua).
-- State: struct.pack('<Bddd', 3, expires, tokens, last).
local capacity = tonumber(ARGV[6])
local rate = limit / w
local tokens, t
local _, e, stokens, slast
if raw and #raw == 25 and string.byte(raw) == 3 then
  _, e, stokens, slast = struct.unpack('<Bddd', raw)
end
if not (e and e > now) then
  local init = tonumber(ARGV[7])
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
if allowed and cost > 0 then
  store(struct.pack('<Bddd', 3, t + reset, tokens, t), t + reset)
end
return {allowed and 1 or 0, remaining, reset, retry}
