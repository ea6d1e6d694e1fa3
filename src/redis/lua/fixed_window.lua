-- Fixed window (algorithm 0), mirrors src/core/fixed_window.cc. The one source of its
-- decision: embed_lua.cmake puts it in the batch script's DECIDE[0] and in the
-- one-check script (see single_head.lua for the locals it reads and sets).
-- State: struct.pack('<Bddd', 0, expires, window_start, count). A write in the window
-- the state already holds changes only the count (bytes 17-24; expires and the TTL
-- stay): `patch`, a SETRANGE, which costs Redis less than a SET with its PX.
-- Carry-over (Policy::on_change, ext o=r|p; batch script only): such a check writes
-- '<Bdddddd' (the same, then the limit, window and capacity it was written under) and,
-- meeting a state written under other ones, takes it as fresh (r, or p with another
-- window) or scales its count (p; src/core/carry.cc). A check without a mode reads
-- either layout as it is and writes the plain one.
local r = math.fmod(now, w) -- floor_to(now, w), exact below 2^53, now may be negative
if r < 0 then r = r + w end
local ws = now - r
local count = 0
local same = false
local mode = x and x.o
local e, sws, scount
if raw and #raw == 25 and string.byte(raw) == 0 then
  local _
  _, e, sws, scount = struct.unpack('<Bddd', raw)
  same = not mode
elseif raw and #raw == 49 and string.byte(raw) == 0 then
  local _, ol, ow, oc
  _, e, sws, scount, ol, ow, oc = struct.unpack('<Bdddddd', raw)
  same = mode and true
  if mode and (ol ~= limit or ow ~= w or oc ~= cap) then
    same = false
    if mode == 'p' and ow == w then
      scount = min(limit, ceil(scount * limit / ol))
    else
      e = nil
    end
  end
end
-- back to full (expires <= now) counts as fresh, like absent or another algorithm's
if e and e > now and sws >= ws then
  ws = sws -- same window, or the clock went back: keep the stored one
  count = scount
else
  same = false
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
  if mode then
    state = struct.pack('<Bdddddd', 0, expires, ws, count, limit, w, cap)
  else
    state = struct.pack('<Bddd', 0, expires, ws, count)
  end
  if same then patch, patch_at = struct.pack('<d', count), 17 end
end
