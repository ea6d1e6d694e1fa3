-- Fixed window (algorithm 0), mirrors src/core/fixed_window.cc. The one source of its
-- decision: embed_lua.cmake puts it in the batch script's DECIDE[0] and in the
-- one-check script (see single_head.lua for the locals it reads and sets).
-- State: struct.pack('<Bddd', 0, expires, window_start, count). A write in the window
-- the state already holds changes only the count (bytes 17-24; expires and the TTL
-- stay): `patch`, a SETRANGE, which costs Redis less than a SET with its PX.
local r = math.fmod(now, w) -- floor_to(now, w), exact below 2^53, now may be negative
if r < 0 then r = r + w end
local ws = now - r
local count = 0
local same = false
if raw and #raw == 25 and string.byte(raw) == 0 then
  local _, e, sws, scount = struct.unpack('<Bddd', raw)
  -- back to full (expires <= now) counts as fresh, like absent or another algorithm's
  if e > now and sws >= ws then
    ws = sws -- same window, or the clock went back: keep the stored one
    count = scount
    same = true
  end
end
local t = max(now, ws)
allowed = count + need <= limit
retry = 0
if allowed then
  count = count + cost
else
  retry = ws + w - t
end
reset = 0
if count > 0 then reset = ws + w - t end
remaining = max(0, limit - count) -- a penalty may take count beyond the limit
expires = ws + w
if allowed and cost > 0 then
  state = struct.pack('<Bddd', 0, expires, ws, count)
  if same then patch, patch_at = struct.pack('<d', count), 17 end
end
