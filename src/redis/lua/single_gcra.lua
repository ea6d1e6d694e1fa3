-- GCRA, one check (see gcra.lua).
-- State: struct.pack('<Bdd', 4, expires, tat) (tat: theoretical arrival time, us).
local interval = w / limit
local tau = interval * tonumber(ARGV[6])
local t = now
local tat = t
if raw and #raw == 17 and string.byte(raw) == 4 then
  local _, e, stat = struct.unpack('<Bdd', raw)
  if e > now then tat = max(stat, t) end
end
local new_tat = tat + need * interval
local allowed = new_tat - t <= tau + EPS * interval
local retry = 0
if allowed then
  if cost > 0 then tat = new_tat end
else
  retry = max(1, ceil(new_tat - tau - t))
end
local remaining = max(0, floor((tau - (tat - t)) / interval + EPS))
local reset = ceil(tat - t)
if allowed and cost > 0 then
  store(struct.pack('<Bdd', 4, ceil(tat), tat), ceil(tat))
end
return {allowed and 1 or 0, remaining, reset, retry}
