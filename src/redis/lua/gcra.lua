-- GCRA (algorithm 4), mirrors src/core/gcra.cc. The one source of its decision (see
-- fixed_window.lua).
-- State: the TAT (theoretical arrival time, us) as a plain number: SET gets the Lua
-- number, which Redis writes exactly ("%.17g"), and tonumber reads it back bit for bit.
-- Its expiry is ceil(tat), so nothing else is stored. The layout before,
-- struct.pack('<Bdd', 4, expires, tat), is still read (a rolling upgrade).
local interval = w / limit
local tau = interval * cap
local t = now
local tat = t
if raw then
  local stat = tonumber(raw)
  if stat then
    -- back to full (expires <= now) counts as fresh, like absent
    if ceil(stat) > now then tat = max(stat, t) end
  elseif #raw == 17 and string.byte(raw) == 4 then
    local _, e, otat = struct.unpack('<Bdd', raw)
    if e > now then tat = max(otat, t) end
  end
end
local new_tat = tat + need * interval
allowed = new_tat - t <= tau + EPS * interval
retry = 0
if allowed then
  if cost > 0 then tat = new_tat end
else
  retry = max(1, ceil(new_tat - tau - t))
  -- Reservation (issue #12; ext item w = max_wait in us, `x` the check's ext table):
  -- allowed when the request's slot comes within max_wait; the TAT moves to it now.
  -- Its wait is answered as a negative retry (redis/reply.cc).
  local mw = x and tonumber(x.w) or 0
  if mw > 0 and cost > 0 and retry <= mw then
    allowed = true
    tat = new_tat
    retry = -retry
  end
end
remaining = max(0, floor((tau - (tat - t)) / interval + EPS))
reset = ceil(tat - t)
expires = ceil(tat)
if allowed and cost > 0 then state = tat end
