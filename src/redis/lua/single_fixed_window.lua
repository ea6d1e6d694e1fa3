-- Fixed window, one check (see fixed_window.lua for the batch version).
-- State: struct.pack('<Bddd', 0, expires, window_start, count).
local r = math.fmod(now, w) -- floor_to(now, w), exact below 2^53, now may be negative
if r < 0 then r = r + w end
local ws = now - r
local count = 0
if raw and #raw == 25 and string.byte(raw) == 0 then
  local _, e, sws, scount = struct.unpack('<Bddd', raw)
  -- back to full (expires <= now) counts as fresh, like absent or another algorithm's
  if e > now and sws >= ws then
    ws = sws -- same window, or the clock went back: keep the stored one
    count = scount
  end
end
local t = max(now, ws)
local allowed = count + need <= limit
local retry = 0
if allowed then
  count = count + cost
else
  retry = ws + w - t
end
local reset = 0
if count > 0 then reset = ws + w - t end
if allowed and cost > 0 then
  store(struct.pack('<Bddd', 0, ws + w, ws, count), ws + w)
end
return {allowed and 1 or 0, limit - count, reset, retry}
