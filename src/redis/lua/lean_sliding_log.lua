-- sluice: the lean sliding-log script (issue #18). A call whose checks are all plain
-- sliding-log decisions (redis_store.cc, LeanSlidingLog in script_wire.cc: kind decide,
-- no block_for, no overage or usage record, cost <= limit, no key twice in a batch)
-- runs this instead of the group runner: one check, a batch, or several callers'
-- batches coalesced into one call, each group all or nothing and decided before the
-- next is read (docs/redis.md, "Coalesced calls"). The state is sliding_window_log.lua's,
-- the same keys and bytes, so a keyspace moves between the two scripts live, and logs
-- of the older member layout ("<count>:<cost>") are read too.
--
-- A log of up to INLINE entries lives in its state key alone (sliding_window_log.lua,
-- "the inline form": struct.pack('<Bddd', 1, expires, last_seen, used), then
-- struct.pack('<dd', cost, time) per entry, oldest first; no ":log" key): a fresh log
-- starts so, and moves into the sorted set only when an entry more would not fit. Most
-- keys of a large key set see a few requests a window, and so do policies with a limit
-- of a few: their logs never need the set. (Binary, not text: unpacking and packing
-- doubles costs Lua a third of what matching and formatting decimal numbers does,
-- bench/lua_state_codec.sh.)
--
-- Per decision, a check alone in its group with a cost writes a fresh log's state first,
-- `SET ... PX ... NX GET`, while the call's last such check found no log: for a fresh
-- log (no state key) one call, the whole decision; for a live one the write is refused
-- and the reply is its state, as a `GET` would have read it, and the next check reads
-- first until one finds no log. (A server that refuses NX with GET, before Redis 7.0:
-- `SET ... NX`, and a refused write falls back to the `GET`.) Other checks: `GET` of the
-- state key. An inline log is decided on its entries
-- (those that left the window dropped) and, allowed with a cost, written whole with
-- `SET ... PX`: two calls. For a log of the sorted set, `ZREMRANGEBYSCORE` of what left
-- the window, and only when it removed something a `ZRANGE 0 0` of the oldest entry
-- left (used = seq - (its cum - its cost); an older member: the costs left, summed);
-- then, allowed with a cost, `ZADD`, `PEXPIRE` and `SET ... PX`. An inline log that
-- outgrows INLINE entries moves into a sorted set: `DEL` (leftovers of an earlier log),
-- one `ZADD` of every entry, `PEXPIRE`, `SET`. What a
-- check needs beyond that is worked out once per policy (limit, window, cost): a fresh
-- log's member, state and TTL, the reply's packed base; no table per check, no closure
-- per call on the allowed path. A denial or a peek (reset_after from the newest entry,
-- retry_after from a search of the log: log_entries.lua, created by the first check
-- that needs it; an inline log: from its entries) writes only what the model does: the
-- advanced clock and the entries dropped, with the state key's TTL kept; a group that
-- is not allowed logs nothing.
--
-- The wire layout is the lean fixed-window script's (script_wire.cc, EncodeLean):
-- KEYS: every check's state key and log key (":log"), group after group.
-- ARGV[1]: "" (Redis's TIME, read once per call: clock.lua) or "c" (caller time, tests
--   only: each group starts with its now, and TTLs are padded by an hour).
-- ARGV[2]: P, the call's distinct policies, then 3 arguments each: limit, window (us),
--   cost.
-- Then per check ONE number, policy * 2 + last, policy indexing the list from 0, last
--   1 on a group's last check; none when P is 0, which says that the call has ONE
--   policy and every check is alone in its group (the common coalesced call: each
--   argument is one more for Redis to parse and for the script to read).
-- The reply: the runner's encoding (lua/runner.lua), one flat array, check after check;
-- a call of one check answered by one integer: that integer alone.
local floor, ceil, max, fmt, byte = math.floor, math.ceil, math.max, string.format, string.byte
local pack, unpack_at = struct.pack, struct.unpack
--@LOG_INLINE@
--@LEAN_HEAD@
-- log_entries.lua's time_freeing, created by the first denial or peek of a sorted-set log.
local freeing
-- Policy i's numbers at pol[8 * i + 1 ..]: 1 limit, 2 window, 3 cost, 4 cost as sent,
-- 5 the packed reply of an allowed decision less 2 * remaining (false: too large to
-- pack), then for the now at hand (false until a check needs them): 6 a fresh log's
-- state and 7 its TTL in ms, as strings (a Lua number given to redis.call is formatted
-- by Redis on every call), 8 an inline entry of the cost at now.
local pol = {}
for i = 0, np - 1 do
  local b, a = 8 * i, 3 + 3 * i
  local limit, w, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  pol[b + 1], pol[b + 2], pol[b + 3], pol[b + 4] = limit, w, cost, ARGV[a + 2]
  pol[b + 5] = (w * (limit + 1) + limit) * 2 + 1 < 9007199254740992 and w * (limit + 1) * 2 + 1
end

-- TTL in ms of state that is back to "full" at `expires` (write_state.lua's ttl_ms).
local function ttl(expires, now)
  local ms = ceil((expires - now) / 1000)
  if ms < 1 then ms = 1 end
  return fmt('%d', ms + PAD)
end

local out, n = {}, 0
-- A group's checks waiting for its outcome, flat and reused from group to group, 10
-- each: key, log key, t, used, seq, policy base, the state's expires to keep
-- (false: nothing to write unless logged), cost, and for an inline log its entries left
-- (packed, as in the state) and their count (else false, 0).
local pend = {}
-- `guess`: the last check alone in its group found no log, so the next one writes first
-- (one call instead of a `GET` and a `SET` when keys are mostly fresh); found one, it
-- reads first (a `GET` is less for Redis to parse than a refused `SET ... NX GET`). `nxget`: the
-- server takes SET's NX and GET together (false from its first refusal in the call on).
local a, k, nkeys, pnow, snow, nxget, guess = 3 + 3 * np, 1, #KEYS, false, false, true, true
while k <= nkeys do
  --@LEAN_GROUP_NOW@
  if gnow ~= pnow then -- (every group in caller-time mode; once on Redis's clock)
    pnow, snow = gnow, fmt('%d', gnow)
    for b = 0, 8 * (np - 1), 8 do pol[b + 6], pol[b + 7], pol[b + 8] = false, false, false end
  end
  local np_, all, first, last = 0, true, true, 0
  repeat
    --@LEAN_CHECK@
    local b = 8 * (v - last) / 2
    local key, key2 = KEYS[k], KEYS[k + 1]
    k = k + 2
    local limit, w, cost = pol[b + 1], pol[b + 2], pol[b + 3]
    local allowed, written, raw = true, false, false
    if solo and guess and cost > 0 then
      local state, ms = pol[b + 6], pol[b + 7]
      if not state then
        state, ms = pack('<Bddddd', 1, gnow + w, gnow, cost, cost, gnow), ttl(gnow + w, gnow)
        pol[b + 6], pol[b + 7] = state, ms
      end
      if nxget then
        -- the reply: none (there was no key: written) or the live log's state
        local r = redis.pcall('SET', key, state, 'PX', ms, 'NX', 'GET')
        if type(r) == 'table' then
          nxget = false -- (refused: a server before Redis 7.0, or a key that is no string)
        else
          written, raw = not r, r
        end
      end
      if not nxget then written = redis.call('SET', key, state, 'PX', ms, 'NX') ~= false end
      if written then
        -- a fresh log: its one entry, in the state alone (the inline form)
        local packed = pol[b + 5]
        if packed then
          n = n + 1
          out[n] = packed + 2 * (limit - cost)
        else
          out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, limit - cost, w, 0
          n = n + 4
        end
      end
    end
    if not written then
      -- the state (sliding_window_log.lua's log_state and raise): t = max(now, last_seen),
      -- entries with ts <= t - window dropped
      local fresh, inl, cnt, t, used, seq, keep = true, false, 0, gnow, 0, 0, false
      if not raw then raw = redis.call('GET', key) end
      if raw and byte(raw, 1) == 1 and #raw >= 25 and (#raw - 25) % 16 == 0 then
        -- the inline form: the entries from the first one still in the window
        local _, e, l, u = unpack_at('<Bddd', raw)
        fresh, used = false, u
        if l > t then t = l end
        if l ~= t then keep = e end
        local h, from, len = t - w, 26, #raw
        while from < len do
          local c, ts = unpack_at('<dd', raw, from)
          if ts > h then break end
          used, from = used - c, from + 16
        end
        cnt, inl = (len + 1 - from) / 16, string.sub(raw, from)
      elseif raw then
        local f, e, l, u, q = string.match(raw, '^(%d) (%S+) (%S+) (%S+) (%S+)$')
        if f == '1' then
          fresh, used, seq = false, tonumber(u), tonumber(q)
          l = tonumber(l)
          if l > t then t = l end
          if l ~= t then keep = e end
          if redis.call('ZREMRANGEBYSCORE', key2, '-inf', t - w) > 0 then
            keep = e
            local o = redis.call('ZRANGE', key2, 0, 0)
            if #o == 0 then
              used = 0
            else
              local m = o[1]
              local c0 = string.match(m, ':(%d+)$')
              if byte(m, 1) >= 63 and byte(m, 9) == 58 then
                used = seq - (struct.unpack('>d', m) - tonumber(c0))
              else -- an older layout: the costs of what is left
                used = 0
                for _, x in ipairs(redis.call('ZRANGE', key2, 0, -1)) do
                  used = used + tonumber(string.match(x, ':(%d+)$'))
                end
              end
            end
          end
        end
      end
      allowed = used + max(cost, 1) <= limit
      if allowed and cost > 0 then
        local remaining, packed = limit - used - cost, pol[b + 5]
        if packed then
          n = n + 1
          out[n] = packed + 2 * remaining
        else
          out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, remaining, w, 0
          n = n + 4
        end
      else
        -- a peek or a denial: reset_after from the newest entry, retry_after (denied) from
        -- the oldest entries whose expiry frees enough room
        local reset, retry = 0, 0
        if used > 0 and inl then
          -- the entries at hand: the newest, and the oldest whose expiry frees enough
          local need, freed = used + max(cost, 1) - limit, 0
          for at = 1, #inl, 16 do
            local c, ts = unpack_at('<dd', inl, at)
            reset = ts + w - t
            freed = freed + c
            if not allowed and retry == 0 and freed >= need then retry = reset end
          end
        elseif used > 0 then
          if not freeing then
            local function int(x)
              return fmt('%d', x)
            end
            --@LOG_ENTRIES@
            freeing = time_freeing
          end
          reset = tonumber(redis.call('ZRANGE', key2, -1, -1, 'WITHSCORES')[2]) + w - t
          if not allowed then
            local ts = freeing({key2 = key2}, used + max(cost, 1) - limit)
            if ts then retry = ts + w - t end
          end
        end
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed and 2 or 0, max(0, limit - used),
          reset, retry
        n = n + 4
      end
      if solo then guess = fresh end
      local s = 10 * np_
      pend[s + 1], pend[s + 2], pend[s + 3], pend[s + 4], pend[s + 5], pend[s + 6], pend[s + 7],
        pend[s + 8], pend[s + 9], pend[s + 10] = key, key2, t, used, seq, b, keep, cost, inl, cnt
      np_ = np_ + 1
    end
    all = all and allowed
  until last == 1
  -- The group's outcome: every check allowed, each one with a cost is logged
  -- (sliding_window_log.lua's COMMIT; an empty log, or an inline one with room, stays
  -- inline); otherwise, and for a peek, the state keeps what the decision normalised
  -- (its flush_logs), with the state key's TTL.
  for s = 0, 10 * (np_ - 1), 10 do
    local key, key2, t, used, seq, b, keep, cost, inl, cnt = pend[s + 1], pend[s + 2],
      pend[s + 3], pend[s + 4], pend[s + 5], pend[s + 6], pend[s + 7], pend[s + 8], pend[s + 9],
      pend[s + 10]
    if all and cost > 0 then
      local w, ms = pol[b + 2], pol[b + 7]
      if t ~= gnow then
        ms = ttl(t + w, gnow)
      elseif not ms then
        ms = ttl(t + w, gnow)
        pol[b + 7] = ms
      end
      if used == 0 or (inl and cnt < INLINE) then
        local entry = t == gnow and pol[b + 8]
        if not entry then
          entry = pack('<dd', cost, t)
          if t == gnow then pol[b + 8] = entry end
        end
        redis.call('SET', key, pack('<Bddd', 1, t + w, t, used + cost) .. (inl or '') .. entry,
          'PX', ms)
      else
        local st = t == gnow and snow or fmt('%d', t)
        if inl then
          -- an inline log outgrows its state: every entry goes into a sorted set (cleared
          -- of leftovers of an earlier log, which the inline form does not read), the
          -- running sums starting from its oldest entry
          redis.call('DEL', key2)
          local z, sum = {}, 0
          for at = 1, #inl, 16 do
            local c, ts = unpack_at('<dd', inl, at)
            sum = sum + c
            z[#z + 1], z[#z + 2] = fmt('%d', ts), pack('>d', sum) .. ':' .. fmt('%d', c)
          end
          z[#z + 1], z[#z + 2] = st, struct.pack('>d', sum + cost) .. ':' .. pol[b + 4]
          redis.call('ZADD', key2, unpack(z))
          seq = used
        else
          redis.call('ZADD', key2, st, struct.pack('>d', seq + cost) .. ':' .. pol[b + 4])
        end
        redis.call('PEXPIRE', key2, ms)
        redis.call('SET', key, fmt('1 %d %d %d %d', t + w, t, used + cost, seq + cost), 'PX', ms)
      end
    elseif keep then
      if inl then
        redis.call('SET', key, pack('<Bddd', 1, keep, t, used) .. inl, 'KEEPTTL')
      else
        redis.call('SET', key, fmt('1 %s %d %d %d', keep, t, used, seq), 'KEEPTTL')
      end
    end
  end
end
if n == 1 then return out[1] end
return out
