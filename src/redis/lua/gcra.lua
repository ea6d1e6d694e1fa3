-- GCRA (algorithm 4), mirrors src/core/gcra.cc. The one source of its decision (see
-- fixed_window.lua).
-- State: the TAT (theoretical arrival time, us) as a plain number: SET gets the Lua
-- number, which Redis writes exactly ("%.17g"), and tonumber reads it back bit for bit.
-- Its expiry is ceil(tat), so nothing else is stored. The layout before,
-- struct.pack('<Bdd', 4, expires, tat), is still read (a rolling upgrade).
-- Carry-over: '<Bddddd' (4, expires, tat, limit, window, capacity), written by a check
-- with a mode (fixed_window.lua); p scales the TAT's distance from now.
-- A check alone in its call or group (`solo`) with a cost writes first and reads after:
-- `SET key <now + cost x interval> PX .. GET` is the whole decision when the key is
-- fresh (absent, or its TAT passed: what a key under its rate mostly is), one Redis
-- call instead of GET + SET. Otherwise it decides on the state GET returned and writes
-- again: the right TAT when allowed, the state it overwrote when denied. `tried`: the
-- caller made that SET already (lean_bucket.lua), and it replaced this state.
local interval = w / limit
local tau = interval * cap
local t = now
local tat = t
local raw, guess, old_e = false, false, false
if solo and not mode and cost > 0 then
  guess = t + need * interval
  local ms = ceil((ceil(guess) - now) / 1000) + PAD
  --@WRITE_FIRST@
else
  raw = redis.call('GET', key) -- the state, or false
end
if raw then
  local stat = tonumber(raw)
  if stat then
    -- back to full (expires <= now) counts as fresh, like absent
    if ceil(stat) > now then tat, old_e = max(stat, t), ceil(stat) end
  elseif #raw == 17 and string.byte(raw) == 4 then
    local _, e, otat = struct.unpack('<Bdd', raw)
    if e > now then tat, old_e = max(otat, t), e end
  elseif #raw == 41 and string.byte(raw) == 4 then
    -- written with its parameters (carry-over: see fixed_window.lua)
    local _, e, otat, ol, ow, oc = struct.unpack('<Bddddd', raw)
    if e > now then
      old_e = e
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
  if guess and tat == guess then state = nil end -- written already
elseif guess then
  -- denied (a live state, or a fresh key at the rounding edge of tau)
  --@PUT_BACK@
end
--@NORMALISED@ tat
--@OPERATIONS@ (the batch script only, after DECIDE[4]: embed_lua.cmake)

-- Refund: the TAT moves back by cost emission intervals, never below now
-- (src/core GcraRefund). The state is the TAT as a plain number (gcra.lua); the
-- layout before (struct '<Bdd') is still read.
REFUND[4] = function(c, now, cost)
  local raw = redis.call('GET', c.key)
  local stat = raw and tonumber(raw)
  if stat then
    if not (ceil(stat) > now) then return end
    c.carry = false
  else
    local found, otat = load(c, now)
    if not found then return end
    stat = otat
  end
  local tat = max(now, stat - cost * (c.window / c.limit))
  c.expires = ceil(tat)
  c.state = tat
  if c.carry then c.state = pack_word(c, tat) end
  store_word(c, now)
end

-- Penalty (FORCE, prelude.lua): the state normalised by the decision itself
-- (word_state.lua, normalised), then the cost added up to the bound.
FORCE[4] = function(c, now)
  local tat = normalised(c, now)
  local interval = c.window / c.limit
  local was = tat
  tat = max(tat, min(tat + c.cost * interval, now + c.bound * interval))
  c.expires = ceil(tat)
  c.state, c.patch = tat, nil
  store_word(c, now)
  return charged_units((tat - was) / interval)
end
