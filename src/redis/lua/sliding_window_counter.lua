-- Sliding window counter (algorithm 2), mirrors src/core/sliding_window_counter.cc.
-- State: struct.pack('<Bdddd', 2, expires, window_start, curr, prev).
DECIDE[2] = function(c, now)
  local w = c.window
  local ws = floor_to(now, w)
  local curr, prev = 0, 0
  local found, sws, scurr, sprev = load(c, now)
  if found then
    if sws >= ws then
      ws = sws
      curr = scurr
      prev = sprev
    elseif sws == ws - w then
      prev = scurr
    end
  end
  local t = max(now, ws)
  local elapsed = t - ws
  local limit = c.limit
  local weight = (w - elapsed) / w
  local estimate = prev * weight + curr
  local need = max(c.cost, 1)
  local allowed = estimate + need <= limit + EPS
  local retry = 0
  if allowed then
    curr = curr + c.cost
    estimate = estimate + c.cost
  elseif curr + need <= limit then
    -- wait until enough of the previous window has slid out
    local room = limit - curr - need
    local e = w - room * w / prev
    retry = max(1, ws + ceil(e) - t)
  else
    -- only in the next window, where this window's count becomes the weighted one
    local room = limit - need
    local e = max(0, w - room * w / curr)
    retry = max(1, ws + w + ceil(e) - t)
  end
  local left = floor(limit - estimate + EPS)
  local remaining = 0
  if left > 0 then remaining = left end
  local reset = 0
  if curr > 0 then
    reset = ws + 2 * w - t
    c.expires = ws + 2 * w
  else
    if prev > 0 then reset = ws + w - t end
    c.expires = ws + w
  end
  c.state = struct.pack('<Bdddd', 2, c.expires, ws, curr, prev)
  return allowed, remaining, reset, retry
end
COMMIT[2] = store_word
-- Refund: the current window's count goes down by cost (not below 0); once the
-- window has rolled over, nothing changes (src/core SlidingWindowCounterRefund).
REFUND[2] = function(c, now, cost)
  local found, sws, scurr, sprev = load(c, now)
  if not found or sws < floor_to(now, c.window) then return end
  local curr = scurr - min(scurr, cost)
  if curr > 0 then c.expires = sws + 2 * c.window else c.expires = sws + c.window end
  c.state = struct.pack('<Bdddd', 2, c.expires, sws, curr, sprev)
  store_word(c, now)
end
