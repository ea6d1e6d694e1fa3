-- GCRA (algorithm 4), mirrors src/core/gcra.cc. The one source of its decision (see
-- fixed_window.lua).
-- State: the TAT (theoretical arrival time, us) as a plain number: SET gets the Lua
-- number, which Redis writes exactly ("%.17g"), and tonumber reads it back bit for bit.
-- Its expiry is ceil(tat), so nothing else is stored. The layout before,
-- struct.pack('<Bdd', 4, expires, tat), is still read (a rolling upgrade).
-- Carry-over: '<Bddddd' (4, expires, tat, limit, window, capacity), written by a check
-- with a mode (fixed_window.lua); p scales the TAT's distance from now.
local raw = redis.call('GET', key) -- the state, or false
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
  elseif #raw == 41 and string.byte(raw) == 4 then
    -- written with its parameters (carry-over: see fixed_window.lua)
    local _, e, otat, ol, ow, oc = struct.unpack('<Bddddd', raw)
    if e > now then
      if mode and (ol ~= limit or ow ~= w or oc ~= cap) then
        if mode == 'p' then
          -- the TAT's distance from now scaled by new / old tau (src/core/carry.cc)
          if otat > t then otat = t + (otat - t) * tau / (ow / ol * oc) end
          tat = max(otat, t)
        end -- r: fresh
      else
        tat = max(otat, t)
      end
    end
  end
end
local new_tat = tat + need * interval
allowed = new_tat - t <= tau + EPS * interval
retry = 0
if allowed then
  if cost > 0 then tat = new_tat end
else
  retry = max(1, ceil(new_tat - tau - t))
  -- Reservation (issue #12; `mw` = max_wait in us, 0: none):
  -- allowed when the request's slot comes within max_wait; the TAT moves to it now.
  -- Its wait is answered as a negative retry (redis/reply.cc).
  if mw > 0 and cost > 0 and retry <= mw then
    allowed = true
    tat = new_tat
    retry = -retry
  end
end
remaining = max(0, floor((tau - (tat - t)) / interval + EPS))
reset = ceil(tat - t)
expires = ceil(tat)
if allowed and cost > 0 then
  if mode then
    state = struct.pack('<Bddddd', 4, expires, tat, limit, w, cap)
  else
    state = tat
  end
end
