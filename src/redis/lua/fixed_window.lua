-- Fixed window (algorithm 0), mirrors src/core/fixed_window.cc. The one source of its
-- decision: embed_lua.cmake puts it in the batch script's DECIDE[0] and in the
-- one-check script (see single_head.lua for the locals it reads and sets).
-- State (docs/redis.md, "Key layout"), one of:
-- - the counter (written from issue #18 on, by a policy with on_change as_is and a
--   limit below 2^31): a plain integer tag * 2^32 + count, where tag = 2^20 + (the
--   window's index mod 2^20) names the window the count is in, with a TTL to the
--   window's end. A decision is then ONE `INCRBY key cost`: its reply is the state
--   after it, and the tag tells whether the count is this window's (a stale or absent
--   key is written fresh with SET PX; a denial gives the cost back with INCRBY -cost,
--   as does a batch that another check denied: `undo`). Tags sit above 2^52, so a
--   GCRA TAT (a plain number below 2^52) never reads as one.
-- - struct.pack('<Bddd', 0, expires, window_start, count), the layout before (still read
--   and, on a key that has it, still written until its window ends: a rolling upgrade);
--   a write in the window the state already holds changes only the count (bytes 17-24;
--   `patch`, a SETRANGE).
-- - carry-over (Policy::on_change, mode 'r' or 'p'): '<Bdddddd' (the same, then the
--   limit, window and capacity it was written under); meeting a state written under
--   other ones, it is taken as fresh (r, or p with another window) or its count scaled
--   (p; src/core/carry.cc). A check without a mode reads either packed layout as it is.
-- If INCRBY is refused (an ACL user set up from an earlier version's line) or the key
-- holds a packed layout, the decision reads the state with GET instead; `tried` says
-- that the caller tried INCRBY already and was refused (lean_fixed_window.lua).
local r = math.fmod(now, w) -- floor_to(now, w), exact below 2^53, now may be negative
if r < 0 then r = r + w end
local ws = now - r
local tag = 1048576 + (ws / w) % 1048576
-- (the tag tells windows apart while a key lives less than 2^19 windows: its TTL is the
-- window's end, plus PAD in caller-time mode, so there windows under 7 ms stay packed)
local lean = not mode and limit < 2147483648 and w * 524288 > (PAD + 1) * 1000
local count = 0
local same = false
local e, sws, scount
local v = false -- the counter after this decision (read through INCRBY or GET)
local incr = false -- INCRBY has applied the cost already
local got = false -- the counter as GET read it (before this decision)
if lean and cost > 0 and cost <= limit and not tried then
  -- (a cost above the limit, an overage's usage report, never fits: read, do not add
  -- a count that could carry into the tag)
  v = redis.pcall('INCRBY', key, cost)
  incr = type(v) == 'number'
  if not incr then v = false end
end
if not incr then
  local raw = redis.call('GET', key)
  local n = raw and tonumber(raw)
  if n and n >= 4503599627370496 then
    v, got = true, n
  elseif raw and #raw == 25 and string.byte(raw) == 0 then
    local _
    _, e, sws, scount = struct.unpack('<Bddd', raw)
    same = not mode
  elseif raw and #raw == 49 and string.byte(raw) == 0 then
    local _, ol, ow, oc
    _, e, sws, scount, ol, ow, oc = struct.unpack('<Bdddddd', raw)
    same = mode and true
    if mode and (ol ~= limit or ow ~= w or oc ~= cap) then
      same = false
      if mode == 'p' and ow == w then
        scount = min(limit, ceil(scount * limit / ol))
      else
        e = nil
      end
    end
  end
end
local from_struct = sws -- the stored state has a packed layout
if v then
  local old = got or v - cost
  local otag = floor(old / 4294967296)
  local d = (otag - tag) % 1048576
  if otag >= 1048576 and otag < 2097152 and d < 524288 then
    -- this window (d == 0), or a later one the clock went back from: keep it
    e, sws, scount = ws + (d + 1) * w, ws + d * w, old - otag * 4294967296
  end
end
-- back to full (expires <= now) counts as fresh, like absent or another algorithm's
if e and e > now and sws >= ws then
  ws = sws -- same window, or the clock went back: keep the stored one
  count = scount
else
  same = false
  e = nil
end
-- A live packed state keeps its layout until its window ends (a rolling upgrade: servers
-- of the previous version read it too); a fresh window starts a counter.
local packed = from_struct and e
local t = max(now, ws)
allowed = count + need <= limit
retry = 0
if allowed then
  count = count + cost
else
  retry = ws + w - t
end
reset = 0
if count > 0 then reset = ws + w - t end
remaining = max(0, limit - count) -- a penalty may take count beyond the limit
expires = ws + w
if incr and not allowed then undo = cost end -- denials consume nothing
if allowed and cost > 0 then
  if lean and not packed then
    if incr then
      if not e then
        -- a fresh window (absent or stale key): INCRBY wrote the bare cost, so the
        -- counter is written whole now, with its TTL (an `undo` then leaves count 0)
        redis.call('SET', key, (1048576 + (ws / w) % 1048576) * 4294967296 + count, 'PX',
          ceil((expires - now) / 1000) + PAD)
      end
      undo = cost -- given back if another check of the batch denies
    else
      state = (1048576 + (ws / w) % 1048576) * 4294967296 + count
    end
  elseif mode then
    state = struct.pack('<Bdddddd', 0, expires, ws, count, limit, w, cap)
  else
    state = struct.pack('<Bddd', 0, expires, ws, count)
  end
  -- (only while the stored expiry, and so the key's TTL, is still right: a window
  -- length changed under the same policy name moves it)
  if same and e == expires then patch, patch_at = struct.pack('<d', count), 17 end
end
--@NORMALISED@ ws, count, packed
--@OPERATIONS@ (the batch script only, after DECIDE[0]: embed_lua.cmake)

-- Refund: the current window's count goes down by cost (not below 0); a state of an
-- earlier window is left alone (src/core FixedWindowRefund).
REFUND[0] = function(c, now, cost)
  local raw = redis.call('GET', c.key)
  local n = raw and tonumber(raw)
  if n and n >= 4503599627370496 then -- the counter (fixed_window.lua)
    local count = counter_count(n, floor_to(now, c.window), c.window)
    if count and count > 0 then
      local give = min(count, cost)
      -- (INCRBY keeps the TTL; SET KEEPTTL where an older ACL line refuses it)
      if type(redis.pcall('INCRBY', c.key, -give)) ~= 'number' then
        redis.call('SET', c.key, n - give, 'KEEPTTL')
      end
    end
    return
  end
  local found, sws, scount = load(c, now, raw or false)
  if not found or sws < floor_to(now, c.window) then return end
  c.expires = sws + c.window
  c.state = pack_word(c, sws, scount - min(scount, cost))
  store_word(c, now)
end

-- Penalty or overage charge (FORCE, prelude.lua): the state normalised by the decision
-- itself (word_state.lua, normalised), then the cost added up to the bound c.bound;
-- returns the units taken. Written as the counter where a decision would write one (no
-- on_change mode, a lean window, no live packed state) and the count fits its 32 bits
-- (an overage's debt may take it to 10^12), else the packed layout without parameters.
FORCE[0] = function(c, now)
  local ws, count, packed = normalised(c, now)
  local was = count
  count = max(count, min(count + c.cost, c.bound))
  c.expires = ws + c.window
  if not packed and not c.mode and c.limit < 2147483648 and count < 4294967296 and
      c.window * 524288 > (PAD + 1) * 1000 then -- (fixed_window.lua's `lean`)
    c.state = counter_value(ws, c.window, count)
  else
    c.state = struct.pack('<Bddd', 0, c.expires, ws, count)
  end
  c.patch = nil
  store_word(c, now)
  return count - was
end
