-- Penalties and blocks (issue #12: Limiter::Penalize, Policy::block_for), mirroring
-- src/core/penalties.cc and the in-process store's blocks (src/memory/memory_store.cc).
-- runner.lua calls them for a check of kind 3 (a forced check: a penalty) or of a
-- policy with block_for (c.block, in us); plain checks never get here (they run the lean
-- one-check scripts or the coalesced one, which do not include this file).
--
-- A block is a key of its own: the state key + ':b' (inside the same hash tag, so in
-- the same slot; declared in KEYS after the check's own, as c.bkey), holding the
-- block's end in us on the script's clock, with a TTL to then. Read and written only
-- by checks of a policy with block_for.

-- FORCE[id](c, now): takes c.cost by force, bounded so that a key's usage stays at most
-- twice its capacity (window counts <= 2 x limit, tokens >= -capacity, TAT <= now +
-- 2 x tau, log units <= 2 x limit), normalising the state first as a decision would, and
-- writes the new state. runner.lua then peeks (DECIDE with cost 0) for the decision.
local FORCE = {}

FORCE[0] = function(c, now)
  local raw = redis.call('GET', c.key)
  local n = raw and tonumber(raw)
  local ws = floor_to(now, c.window)
  local count = 0
  local counter = n and n >= 4503599627370496 -- fixed_window.lua's counter
  if counter then
    local cc, cws = counter_count(n, ws, c.window)
    if cc then ws, count = cws, cc end
  else
    local found, sws, scount = load(c, now, raw or false)
    if found and sws >= ws then ws, count = sws, scount end
  end
  count = max(count, min(count + c.cost, 2 * c.limit))
  c.expires = ws + c.window
  if (counter or not raw) and not c.mode and c.limit < 2147483648 and
      c.window * 524288 > (PAD + 1) * 1000 then -- (fixed_window.lua's `lean`)
    c.state = counter_value(ws, c.window, count)
  else
    c.state = struct.pack('<Bddd', 0, c.expires, ws, count)
  end
  c.patch = nil
  store_word(c, now)
end

FORCE[1] = function(c, now)
  local st = log_state(c)
  raise(c, st, now)
  local add = min(c.cost, 2 * c.limit - st.used)
  if add > 0 then
    local cost = c.cost
    c.cost = add
    COMMIT[1](c, now)
    c.cost = cost
  end
end

FORCE[2] = function(c, now)
  local found, sws, scurr, sprev = load(c, now)
  local w = c.window
  local ws = floor_to(now, w)
  local curr, prev = 0, 0
  if found then
    if sws >= ws then
      ws, curr, prev = sws, scurr, sprev
    elseif sws == ws - w then
      prev = scurr
    end
  end
  curr = max(curr, min(curr + c.cost, 2 * c.limit))
  c.expires = ws + 2 * w
  c.state, c.patch = struct.pack('<Bdddd', 2, c.expires, ws, curr, prev), nil
  store_word(c, now)
end

FORCE[3] = function(c, now)
  local found, stokens, slast = load(c, now)
  local cap, rate = c.cap, c.limit / c.window
  local tokens, t
  if found then
    tokens, t = refill(stokens, slast, now, cap, rate)
  else
    if c.init >= 0 then tokens = c.init else tokens = cap end
    t = now
  end
  tokens = max(min(tokens, -cap), tokens - c.cost)
  local reset = 0
  if not (tokens + EPS >= cap) then reset = ceil((cap - tokens) / rate) end
  c.expires = t + reset
  if c.init >= 0 and c.init < cap then c.expires = c.expires + c.window end
  c.state, c.patch = struct.pack('<Bddd', 3, c.expires, tokens, t), nil
  store_word(c, now)
end

FORCE[4] = function(c, now)
  local raw = redis.call('GET', c.key)
  local tat = now
  local stat = raw and tonumber(raw)
  if stat then
    if ceil(stat) > now then tat = max(stat, now) end
  elseif raw and #raw == 17 and string.byte(raw) == 4 then -- gcra.lua's previous layout
    local _, e, otat = struct.unpack('<Bdd', raw)
    if e > now then tat = max(otat, now) end
  elseif raw and #raw == 41 and string.byte(raw) == 4 then -- carry-over (gcra.lua), as load()
    local _, e, otat, ol, ow, oc = struct.unpack('<Bddddd', raw)
    if e > now and ol == c.limit and ow == c.window and oc == c.cap then tat = max(otat, now) end
  end
  local interval = c.window / c.limit
  local tau = interval * c.cap
  tat = max(tat, min(tat + c.cost * interval, now + 2 * tau))
  c.expires = ceil(tat)
  c.state, c.patch = tat, nil
  store_word(c, now)
end

-- A check of a policy with block_for (c.block, in us): a blocked key is denied (nothing
-- remaining, retry_after and reset_after at least the time left of the block); a
-- denial by the policy itself (not a peek, not during a block), or a penalty that left
-- the key over its limit, starts the block. Denials during a block do not extend it.
local function apply_block(c, now, forced, allowed, remaining, reset, retry)
  local bkey = c.bkey
  local untl = tonumber(redis.call('GET', bkey))
  local left = 0
  if untl and untl > now then left = untl - now end
  if left == 0 then
    if allowed or (c.cost == 0 and not forced) then return allowed, remaining, reset, retry end
    left = c.block
    redis.call('SET', bkey, int(now + left), 'PX', int(ttl_ms(now + left, now)))
  end
  return false, 0, max(reset, left), max(retry, left)
end
