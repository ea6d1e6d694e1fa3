-- GCRA, one check (see gcra.lua).
-- State: "4 <expires> <tat>" (theoretical arrival time, microseconds, a double).
local interval = w / limit
local tau = interval * tonumber(ARGV[6])
local t = now
local tat = t
if raw then
  local e, stat = string.match(raw, '^4 (%S+) (%S+)$')
  if e and tonumber(e) > now then tat = max(tonumber(stat), t) end
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
  store(string.format('4 %d %.17g', ceil(tat), tat), ceil(tat))
end
return {allowed and 1 or 0, remaining, reset, retry}
