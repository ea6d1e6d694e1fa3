-- Sliding window log (algorithm 1), mirrors src/core/sliding_window_log.cc.
-- Two keys per check: c.key holds "1 <expires> <last_seen> <used> <seq>" (used: the
-- running sum of the entries' costs, so a check never sums the log), and c.key2 a
-- ZSET with one member "<cum>:<cost>" per accepted request, scored by its time. <cum>
-- is the running sum of the costs logged (the state's <seq>, which restarts when the
-- log is empty), as a big-endian IEEE double (8 bytes, struct.pack('>d')): for positive
-- numbers their byte order is their numeric order, so members with one score sort in
-- the order they were logged (decimal digits would not: "10" < "9"), and the member
-- stays as short as the older "<count>:<cost>". The sum of the costs of the oldest
-- entries up to rank r is
-- then cum(r) - (cum(0) - cost(0)), and a denial finds its retry time by a binary search
-- over ranks, O(log^2 n), instead of a walk over the log (issue #11: a cost of 300,000
-- against 300,000 entries took Redis 0.7 s). Logs written before this layout (members
-- "<count>:<cost>", which start with an ASCII digit where a double >= 1 starts with a
-- byte >= 0x3F) are still read, with the walk, until they expire.
-- The inline form (issue #18): a log of up to INLINE entries is c.key alone,
-- struct.pack('<Bddd', 1, expires, last_seen, used) then struct.pack('<dd', cost, time)
-- per entry, oldest first (entries that left the window may still be there, and `used`
-- counts them), and c.key2 is not read (leftovers of an earlier log may be there). A new
-- or empty log starts so (here and in lean_sliding_log.lua); here its state is st.inl,
-- the entries still in the window as they are packed. An entry more than INLINE moves
-- them all into a fresh sorted set (`spill`), the running sums starting from the oldest
-- entry, and so does a refund (which works on the sorted set alone).
-- A denied request adds no entry; like the in-process store it only advances the
-- key's clock (last_seen) and drops entries that have left the window.
local logs = {} -- state by key, so one key checked twice in a batch sees its own updates
--@LOG_INLINE@

local function log_state(c, now)
  local st = logs[c.key]
  if st then return st end
  st = {fresh = true, used = 0, seq = 0, expires = 0}
  local raw = redis.call('GET', c.key)
  if raw and string.byte(raw, 1) == 1 and #raw >= 25 and (#raw - 25) % 16 == 0 then
    local _, e, l, u = struct.unpack('<Bddd', raw)
    st = {fresh = false, expires = e, last = l, used = u, seq = 0, inl = string.sub(raw, 26)}
  elseif raw then
    local a, e, l, u, q = string.match(raw, '^(%d) (%S+) (%S+) (%S+) (%S+)$')
    if a == '1' then
      st = {fresh = false, expires = tonumber(e), last = tonumber(l), used = tonumber(u),
        seq = tonumber(q)}
    end
  end
  logs[c.key] = st
  return st
end

-- An inline log's entries into a fresh sorted set (cleared of leftovers of an earlier
-- log), the running sums starting from its oldest entry; its state is then the text
-- form, which the caller writes (or flush_logs, st.dirty).
local function spill(c, st, now)
  redis.call('DEL', c.key2)
  local z, sum, inl = {}, 0, st.inl
  for at = 1, #inl, 16 do
    local cost, ts = struct.unpack('<dd', inl, at)
    sum = sum + cost
    z[#z + 1], z[#z + 2] = int(ts), member(sum, cost)
  end
  if sum > 0 then
    redis.call('ZADD', c.key2, unpack(z))
    redis.call('PEXPIRE', c.key2, int(ttl_ms(st.expires, now)))
  end
  st.inl, st.seq, st.dirty = nil, sum, true
end

-- The state key's value for st.
local function log_value(st)
  if st.inl then return struct.pack('<Bddd', 1, st.expires, st.last, st.used) .. st.inl end
  return '1 ' .. int(st.expires) .. ' ' .. int(st.last) .. ' ' .. int(st.used) .. ' ' ..
    int(st.seq)
end

-- t = max(now, last_seen); entries with ts <= t - window can never count again.
-- DECIDE and COMMIT both raise with the same t: the second time every entry up to the
-- horizon is already gone (entries added since are scored t, above it), so the
-- ZRANGEBYSCORE is skipped (st.trimmed: the highest horizon trimmed so far), one
-- Redis call less per allowed request.
local function raise(c, st, now)
  local t = now
  if st.last and st.last > t then t = st.last end
  if st.inl then
    local inl, h, from = st.inl, t - c.window, 1
    while from < #inl do
      local cost, ts = struct.unpack('<dd', inl, from)
      if ts > h then break end
      st.used, from = st.used - cost, from + 16
    end
    if from > 1 then
      st.inl, st.dirty = string.sub(inl, from), true
    end
    if st.last ~= t then st.dirty = true end
    st.last = t
  elseif not st.fresh then
    local h = t - c.window
    if not st.trimmed or h > st.trimmed then
      st.trimmed = h
      local horizon = int(h)
      local old = redis.call('ZRANGEBYSCORE', c.key2, '-inf', horizon)
      if #old > 0 then
        for i = 1, #old do st.used = st.used - entry_cost(old[i]) end
        redis.call('ZREMRANGEBYSCORE', c.key2, '-inf', horizon)
        st.dirty = true
      end
    end
    if st.last ~= t then st.dirty = true end
    st.last = t
  end
  return t
end

DECIDE[1] = function(c, now)
  local st = log_state(c, now)
  local t = raise(c, st, now)
  local w = c.window
  local need = max(c.cost, 1)
  local used = st.used
  local allowed = used + need <= c.limit
  local retry = 0
  local inl = st.inl
  if not allowed then
    -- the oldest entries leave first: find the one whose expiry frees enough room
    local excess, ts = used + need - c.limit, nil
    if inl then
      local freed = 0
      for at = 1, #inl, 16 do
        local cost, at_ts = struct.unpack('<dd', inl, at)
        freed = freed + cost
        if freed >= excess then
          ts = at_ts
          break
        end
      end
    else
      ts = time_freeing(c, excess)
    end
    if ts then retry = ts + w - t end
  end
  local reset = 0
  if allowed and c.cost > 0 then
    used = used + c.cost
    reset = w
  elseif used > 0 and inl then
    local _, ts = struct.unpack('<dd', inl, #inl - 15)
    reset = ts + w - t
  elseif used > 0 then
    local last = redis.call('ZRANGE', c.key2, -1, -1, 'WITHSCORES')
    reset = tonumber(last[2]) + w - t
  end
  return allowed, max(0, c.limit - used), reset, retry -- (a penalty may exceed the limit)
end

COMMIT[1] = function(c, now)
  local st = logs[c.key]
  local t = raise(c, st, now)
  if st.fresh or (st.used == 0 and not st.inl) then
    -- a new log, or one left empty: the inline form (a sorted set left by an earlier log
    -- is not read, and spill clears it)
    st.fresh, st.inl, st.last = false, '', t
  end
  st.expires = t + c.window
  local ttl = int(ttl_ms(st.expires, now))
  if st.inl then
    st.inl = st.inl .. struct.pack('<dd', c.cost, t)
    st.used = st.used + c.cost
    -- an entry more than INLINE: all of them into the sorted set, one ZADD
    if #st.inl > 16 * INLINE then spill(c, st, now) end
  else
    if st.used == 0 then st.seq = 0 end -- an empty log restarts its running sum
    st.seq = st.seq + c.cost
    st.used = st.used + c.cost
    redis.call('ZADD', c.key2, int(t), member(st.seq, c.cost))
    redis.call('PEXPIRE', c.key2, ttl)
  end
  redis.call('SET', c.key, log_value(st), 'PX', ttl)
  st.dirty = false
end

-- After the batch: keep what raise() normalised for logs that were not committed.
local function flush_logs()
  for key, st in pairs(logs) do
    if st.dirty and not st.fresh then redis.call('SET', key, log_value(st), 'KEEPTTL') end
  end
end
--@OPERATIONS@ (the batch script and the one-check sliding log script only: embed_lua.cmake)

-- Refund: drop what left the window, as a decision does, then remove up to `cost`
-- units from the newest entries (src/core SlidingWindowLogRefund). Entries with one
-- timestamp may come back in another order than they were added, which changes no
-- decision: only the sum of the costs at each timestamp counts.
REFUND[1] = function(c, now, cost)
  local st = log_state(c, now)
  if st.fresh then return end
  local t = raise(c, st, now)
  if st.inl then spill(c, st, now) end
  local newest
  while true do
    newest = redis.call('ZRANGE', c.key2, -1, -1, 'WITHSCORES')
    if cost <= 0 or #newest == 0 then break end
    local ec = entry_cost(newest[1])
    redis.call('ZREM', c.key2, newest[1])
    if ec > cost then
      -- keep the rest of the entry; its running sum goes down by what was removed
      local cum = entry_cum(newest[1])
      local kept
      if cum then
        kept = member(cum - cost, ec - cost)
      else
        kept = string.match(newest[1], '^(%d+):') .. ':' .. int(ec - cost)
      end
      redis.call('ZADD', c.key2, newest[2], kept)
      st.used = st.used - cost
      cost = 0
    else
      st.used = st.used - ec
      cost = cost - ec
    end
  end
  if #newest > 0 then
    st.expires = tonumber(newest[2]) + c.window
    -- the next entry continues the running sum from the newest one left
    local cum = entry_cum(newest[1])
    if cum then st.seq = cum end
  else
    st.expires = t
  end
  local ttl = int(ttl_ms(st.expires, now))
  redis.call('PEXPIRE', c.key2, ttl)
  redis.call('SET', c.key, log_value(st), 'PX', ttl)
  st.dirty = false
end

-- Penalty (FORCE, prelude.lua): the log normalised as a decision would, then the units
-- added up to twice the limit, as a commit of that many.
FORCE[1] = function(c, now)
  local st = log_state(c, now)
  raise(c, st, now)
  local add = min(c.cost, c.bound - st.used)
  if add > 0 then
    local cost = c.cost
    c.cost = add
    COMMIT[1](c, now)
    c.cost = cost
    return add
  end
  return 0
end
