-- Fixed window (algorithm 0), mirrors src/core/fixed_window.cc.
-- State: struct.pack('<Bddd', 0, expires, window_start, count).
DECIDE[0] = function(c, now)
  local w = c.window
  local ws = floor_to(now, w)
  local count = 0
  local found, sws, scount = load(c, now)
  if found and sws >= ws then
    ws = sws -- same window, or the clock went back: keep the stored one
    count = scount
  end
  local t = max(now, ws)
  local need = max(c.cost, 1)
  local allowed = count + need <= c.limit
  local retry = 0
  if allowed then
    count = count + c.cost
  else
    retry = ws + w - t
  end
  local reset = 0
  if count > 0 then reset = ws + w - t end
  c.expires = ws + w
  c.state = struct.pack('<Bddd', 0, c.expires, ws, count)
  return allowed, c.limit - count, reset, retry
end
COMMIT[0] = store_word
-- Refund: the current window's count goes down by cost (not below 0); a state of an
-- earlier window is left alone (src/core FixedWindowRefund).
REFUND[0] = function(c, now, cost)
  local found, sws, scount = load(c, now)
  if not found or sws < floor_to(now, c.window) then return end
  c.expires = sws + c.window
  c.state = struct.pack('<Bddd', 0, c.expires, sws, scount - min(scount, cost))
  store_word(c, now)
end
