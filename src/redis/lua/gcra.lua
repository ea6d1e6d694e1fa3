-- GCRA (algorithm 4), mirrors src/core/gcra.cc. The one source of its decision (see
-- fixed_window.lua).
-- State: struct.pack('<Bdd', 4, expires, tat) (tat: theoretical arrival time, us).
local interval = w / limit
local tau = interval * cap
local t = now
local tat = t
if raw and #raw == 17 and string.byte(raw) == 4 then
  local _, e, stat = struct.unpack('<Bdd', raw)
  if e > now then tat = max(stat, t) end
end
local new_tat = tat + need * interval
allowed = new_tat - t <= tau + EPS * interval
retry = 0
if allowed then
  if cost > 0 then tat = new_tat end
else
  retry = max(1, ceil(new_tat - tau - t))
end
remaining = max(0, floor((tau - (tat - t)) / interval + EPS))
reset = ceil(tat - t)
expires = ceil(tat)
if allowed and cost > 0 then state = struct.pack('<Bdd', 4, expires, tat) end
