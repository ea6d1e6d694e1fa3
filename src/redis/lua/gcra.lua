-- GCRA (algorithm 4), mirrors src/core/gcra.cc.
-- State: struct.pack('<Bdd', 4, expires, tat) (tat: theoretical arrival time, us).
DECIDE[4] = function(c, now)
  local interval = c.window / c.limit
  local tau = interval * c.cap
  local t = now
  local found, stat = load(c, now)
  local tat = t
  if found then tat = max(stat, t) end
  local need = max(c.cost, 1)
  local new_tat = tat + need * interval
  local allowed = new_tat - t <= tau + EPS * interval
  local retry = 0
  if allowed then
    if c.cost > 0 then tat = new_tat end
  else
    retry = max(1, ceil(new_tat - tau - t))
  end
  local remaining = max(0, floor((tau - (tat - t)) / interval + EPS))
  local reset = ceil(tat - t)
  c.expires = ceil(tat)
  c.state = struct.pack('<Bdd', 4, c.expires, tat)
  return allowed, remaining, reset, retry
end
COMMIT[4] = store_word
-- Refund: the TAT moves back by cost emission intervals, never below now
-- (src/core GcraRefund).
REFUND[4] = function(c, now, cost)
  local found, stat = load(c, now)
  if not found then return end
  local tat = max(now, stat - cost * (c.window / c.limit))
  c.expires = ceil(tat)
  c.state = struct.pack('<Bdd', 4, c.expires, tat)
  store_word(c, now)
end
