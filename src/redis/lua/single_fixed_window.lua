-- Fixed window, one check (see fixed_window.lua for the batch version).
-- State: "0 <expires> <window_start> <count>".
local r = math.fmod(now, w) -- floor_to(now, w), exact below 2^53, now may be negative
if r < 0 then r = r + w end
local ws = now - r
local count = 0
if raw then
  local e, sws, scount = string.match(raw, '^0 (%S+) (%S+) (%S+)$')
  -- absent, another algorithm's, or back to full (expires <= now): fresh
  if e and tonumber(e) > now then
    sws = tonumber(sws)
    if sws >= ws then
      ws = sws -- same window, or the clock went back: keep the stored one
      count = tonumber(scount)
    end
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
  store(string.format('0 %d %d %d', ws + w, ws, count), ws + w)
end
return {allowed and 1 or 0, limit - count, reset, retry}
