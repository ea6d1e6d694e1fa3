-- Sliding window counter (algorithm 2), mirrors src/core/sliding_window_counter.cc.
-- The one source of its decision (see fixed_window.lua).
-- State: struct.pack('<Bdddd', 2, expires, window_start, curr, prev). A write in the
-- window the state holds, with a count already in it, changes only curr (bytes 17-24;
-- expires, ws + 2w, and the TTL stay): `patch`, a SETRANGE (see fixed_window.lua).
-- Carry-over: '<Bddddddd' adds the limit, window and capacity (fixed_window.lua); p
-- scales both counts.
-- Read first, as a live key (what a state that lives two windows mostly is) needs: GET,
-- then `patch` or a SET. While a call's keys are mostly fresh, lean_bucket.lua writes
-- a lone check's fresh state first instead (`SET key <this window's count of the cost
-- alone> PX .. GET`), which is the whole decision on an absent key or one whose windows
-- have both gone by; otherwise it gives this body the state that SET replaced (`tried`):
-- decided on, then written again whole (the key holds the guess), or put back when
-- denied.
local r = math.fmod(now, w) -- floor_to(now, w)
if r < 0 then r = r + w end
local ws = now - r
local raw, guess = false, false
if tried then
  guess, raw = struct.pack('<Bdddd', 2, ws + 2 * w, ws, cost, 0), tried
else
  raw = redis.call('GET', key) -- the state, or false
end
local curr, prev = 0, 0
local same = false
local e, sws, scurr, sprev
local layout = not mode -- the stored layout is the one this check writes
if raw and #raw == 33 and string.byte(raw) == 2 then
  local _
  _, e, sws, scurr, sprev = struct.unpack('<Bdddd', raw)
elseif raw and #raw == 57 and string.byte(raw) == 2 then
  -- written with its parameters (carry-over: see fixed_window.lua)
  local _, ol, ow, oc
  _, e, sws, scurr, sprev, ol, ow, oc = struct.unpack('<Bddddddd', raw)
  layout = mode and true
  if mode and (ol ~= limit or ow ~= w or oc ~= cap) then
    layout = false
    if mode == 'p' and ow == w then
      scurr = min(limit, ceil(scurr * limit / ol))
      sprev = min(limit, ceil(sprev * limit / ol))
    else
      e = nil
    end
  end
end
if e and e > now then
  if sws >= ws then
    ws = sws
    curr = scurr
    prev = sprev
    same = layout and scurr > 0
  elseif sws == ws - w then
    prev = scurr
  end
end
local t = max(now, ws)
local elapsed = t - ws
local weight = (w - elapsed) / w
local estimate = prev * weight + curr
allowed = estimate + need <= limit + EPS
retry = 0
if allowed then
  curr = curr + cost
  estimate = estimate + cost
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
remaining = 0
if left > 0 then remaining = left end
reset = 0
if curr > 0 then
  reset = ws + 2 * w - t
  expires = ws + 2 * w
else
  if prev > 0 then reset = ws + w - t end
  expires = ws + w
end
if allowed and cost > 0 then
  if mode then
    state = struct.pack('<Bddddddd', 2, expires, ws, curr, prev, limit, w, cap)
  else
    state = struct.pack('<Bdddd', 2, expires, ws, curr, prev)
  end
  -- (only while the stored expiry, and so the key's TTL, is still right: a window
  -- length changed under the same policy name moves it)
  if same and e == expires then patch, patch_at = struct.pack('<d', curr), 17 end
  if guess then
    patch = nil -- (the key holds the guess now, not the state patched)
    if state == guess then state = nil end -- written already
  end
elseif guess then
  local old_e = e and e > now and e
  --@PUT_BACK@
end
--@NORMALISED@ ws, curr, prev
--@OPERATIONS@ (the batch script only, after DECIDE[2]: embed_lua.cmake)

-- Refund: the current window's count goes down by cost (not below 0); once the
-- window has rolled over, nothing changes (src/core SlidingWindowCounterRefund).
REFUND[2] = function(c, now, cost)
  local found, sws, scurr, sprev = load(c, now)
  if not found or sws < floor_to(now, c.window) then return end
  local curr = scurr - min(scurr, cost)
  if curr > 0 then c.expires = sws + 2 * c.window else c.expires = sws + c.window end
  c.state = pack_word(c, sws, curr, sprev)
  store_word(c, now)
end

-- Penalty (FORCE, prelude.lua): the state normalised by the decision itself
-- (word_state.lua, normalised), then the cost added up to the bound.
FORCE[2] = function(c, now)
  local ws, curr, prev = normalised(c, now)
  local w = c.window
  local was = curr
  if c.est then
    -- an overage charge: bounded on the estimate, the weighted previous window included
    local t = max(now, ws)
    local estimate = prev * ((w - (t - ws)) / w) + curr
    local room = floor(c.bound - estimate + EPS)
    if room > 0 then curr = curr + min(c.cost, room) end
  else
    curr = max(curr, min(curr + c.cost, c.bound))
  end
  -- (back to full as a decision's state: a charge that took nothing leaves curr at 0)
  if curr > 0 then c.expires = ws + 2 * w else c.expires = ws + w end
  c.state, c.patch = struct.pack('<Bdddd', 2, c.expires, ws, curr, prev), nil
  store_word(c, now)
  return curr - was
end
