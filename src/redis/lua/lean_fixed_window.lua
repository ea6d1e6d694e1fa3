-- sluice: the lean fixed-window script (issue #18). A call whose checks are all plain
-- fixed-window decisions (redis_store.cc, LeanFixedWindow in script_wire.cc: a policy
-- with on_change as_is, no block_for, a limit below 2^31, cost <= limit, kind decide)
-- runs this instead of the group runner: one check, a batch, or several callers'
-- batches coalesced into one call, each group all or nothing and decided before the
-- next is read (docs/redis.md, "Coalesced calls"). Per decision the work is ONE
-- command on the counter (fixed_window.lua, "the counter"). While most keys are live,
-- that is `INCRBY key cost`: its reply is the state after it, and its tag says whether
-- the count is this window's; a fresh window (an absent key, or another window's
-- count) then adds a `SET ... PX` (the counter whole, with its TTL). While most keys are
-- absent (many keys, short windows: each key expires with its window), it is `SET key
-- <fresh counter> PX <ttl> NX`, which writes a fresh window whole and says whether there
-- was a key; there was: the `INCRBY` follows. Which comes first is chosen per check from
-- the call's checks so far (`lead`). A denial, or a group that another check denied,
-- adds an `INCRBY key -cost`. What a check needs beyond that is worked out once per policy
-- (a policy here is a limit, a window and a cost): this window's counter base, the
-- fresh counter and its TTL as strings (a Lua number given to redis.call is formatted
-- by Redis on every call), the reply's packed base; so a check that stays in its
-- window costs one INCRBY, two comparisons and one addition, with no table built.
-- A key that INCRBY cannot add to (the packed layout of earlier versions during a
-- rolling upgrade, another algorithm's state, an ACL line without +incrby) and a peek
-- (cost 0) are decided by fixed_window.lua's body itself, wrapped below as
-- `decide_body` (embed_lua.cmake), which reads every layout; its writes wait for the
-- group, as the runner's do (write_state.lua's `write`, here `store`).
--
-- The wire layout (docs/redis.md, "Wire layout"; script_wire.cc, EncodeLeanFixedWindow):
-- KEYS: every check's key, group after group.
-- ARGV[1]: "" (Redis's TIME, read once per call: clock.lua) or "c" (caller time, tests
--   only: each group starts with its now, and TTLs are padded by an hour).
-- ARGV[2]: P, the call's distinct policies, then 3 arguments each: limit, window (us),
--   cost (an integer; sent to INCRBY as it is).
-- Then per check ONE number, policy * 2 + last, policy indexing the list from 0, last
--   1 on a group's last check; none when P is 0, which says that the call has ONE
--   policy and every check is alone in its group (the common coalesced call: each
--   argument is one more for Redis to parse and for the script to read).
-- The reply: the runner's encoding (lua/runner.lua), one flat array, check after check;
-- a call of one check answered by one integer: that integer alone.
local floor, ceil, max, min, type = math.floor, math.ceil, math.max, math.min, type
--@LEAN_HEAD@
-- The slow path's functions: write_state.lua's `write` (as `store`) and decide_body,
-- created by the first check that needs them (a closure costs every call that creates
-- it, and most calls need neither).
local store, decide_body
-- Policy i's numbers at pol[9 * i + 1 ..]: 1 limit, 2 window, 3 cost, 4 cost as sent,
-- then for the now at hand: 5 this window's counter base (tag * 2^32), 6 the fresh
-- counter (base + cost) as a string and 7 its TTL in ms as a string, 8 reset_after, 9
-- the packed reply of an allowed decision less 2 * remaining (false: too large to pack).
local pol = {}
for i = 0, np - 1 do
  local b, a = 9 * i, 3 + 3 * i
  pol[b + 1], pol[b + 2], pol[b + 3], pol[b + 4] = tonumber(ARGV[a]), tonumber(ARGV[a + 1]),
    tonumber(ARGV[a + 2]), ARGV[a + 2]
end
local out, n = {}, 0
-- A group's applied INCRBYs (key, cost), to give back if the group is denied, and its
-- body-decided checks' writes (key, cost, state, expires, patch, patch_at), made only
-- if it is allowed; flat, reused from group to group (created for the first group of
-- more than one check).
local undo, slow
-- `lead`: the call's checks so far that found no key, less those that found one
-- (counted from -4 to 4); from 0 up a check writes a fresh window first (`SET ... NX`).
local a, k, nkeys, pnow, lead = 3 + 3 * np, 1, #KEYS, false, 0
while k <= nkeys do
  --@LEAN_GROUP_NOW@
  if gnow ~= pnow then -- (every group in caller-time mode; once on Redis's clock)
    pnow = gnow
    for b = 0, 9 * (np - 1), 9 do
      local limit, w = pol[b + 1], pol[b + 2]
      local r = math.fmod(gnow, w) -- floor_to(now, w), exact below 2^53
      if r < 0 then r = r + w end
      local ws = gnow - r
      local reset = ws + w - gnow
      local base = (1048576 + (ws / w) % 1048576) * 4294967296
      pol[b + 5], pol[b + 6], pol[b + 7], pol[b + 8] = base,
        string.format('%d', base + pol[b + 3]), string.format('%d', ceil(reset / 1000) + PAD), reset
      pol[b + 9] = (reset * (limit + 1) + limit) * 2 + 1 < 9007199254740992 and
        reset * (limit + 1) * 2 + 1
    end
  end
  local nu, ns, all, first, last = 0, 0, true, true, 0
  repeat
    --@LEAN_CHECK@
    local b = 9 * (v - last) / 2
    local key = KEYS[k]
    k = k + 1
    if not solo and not undo then undo, slow = {}, {} end
    local limit, cost, base = pol[b + 1], pol[b + 3], pol[b + 5]
    local c, wrote = false, false
    if cost > 0 then
      if lead >= 0 then
        -- a fresh window's counter, written only if there is no key (cost <= limit:
        -- allowed); there is one: read and decided below, after its INCRBY
        local r = redis.pcall('SET', key, pol[b + 6], 'PX', pol[b + 7], 'NX')
        wrote = type(r) == 'table' and r.ok ~= nil
      end
      if not wrote then c = redis.pcall('INCRBY', key, pol[b + 4]) end
      -- (an INCRBY that made the key replies the cost alone)
      if wrote or c == cost then
        if lead < 4 then lead = lead + 1 end
      elseif lead > -4 then
        lead = lead - 1
      end
    end
    local allowed = true
    if not wrote and type(c) ~= 'number' then
      -- a peek, or a key INCRBY cannot add to: fixed_window.lua's body decides
      --@DECIDE_BODY@
      local remaining, reset, retry, state, expires, patch, patch_at
      allowed, remaining, reset, retry, state, expires, patch, patch_at =
        decide_body(key, limit, pol[b + 2], cost, gnow, cost > 0)
      if solo then
        if allowed and cost > 0 and state then store(key, state, expires, patch, patch_at, gnow) end
      else
        local s = 6 * ns
        slow[s + 1], slow[s + 2], slow[s + 3], slow[s + 4], slow[s + 5], slow[s + 6] = key, cost,
          state or false, expires, patch or false, patch_at
        ns = ns + 1
      end
      local cap = limit -- (a window's capacity is its limit)
      --@REPLY_PUT@
    else
      -- the counter after this decision (fixed_window.lua, "the counter")
      local old, reset, remaining, packed = c and c - cost, pol[b + 8], 0, pol[b + 9]
      if wrote then
        remaining = limit - cost
      elseif old >= base and old < base + 4294967296 then
        -- this window's count: allowed when it fits (c - base is the count after it)
        allowed = c - base <= limit
        if allowed then remaining = base + limit - c else remaining = max(0, base + limit - old) end
      else
        local otag = floor(old / 4294967296)
        local d = (otag - base / 4294967296) % 1048576
        if otag >= 1048576 and otag < 2097152 and d < 524288 then
          -- a later window the clock went back from: its count; it starts after now, so
          -- reset_after is the whole window
          reset = pol[b + 2]
          packed = (reset * (limit + 1) + limit) * 2 + 1 < 9007199254740992 and
            reset * (limit + 1) * 2 + 1
          allowed = old - otag * 4294967296 + cost <= limit
          remaining = max(0, limit - (old - otag * 4294967296) - (allowed and cost or 0))
        else
          -- a fresh window (absent or stale key): INCRBY wrote the bare cost, so the
          -- counter is written whole, with its TTL (cost <= limit: always allowed)
          redis.call('SET', key, pol[b + 6], 'PX', pol[b + 7])
          remaining = limit - cost
        end
      end
      if allowed and packed then
        n = n + 1
        out[n] = packed + 2 * remaining
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed and 2 or 0, remaining, reset,
          allowed and 0 or reset
        n = n + 4
      end
      if solo then
        if not allowed then redis.call('INCRBY', key, -cost) end -- denials consume nothing
      else
        undo[2 * nu + 1], undo[2 * nu + 2] = key, cost
        nu = nu + 1
      end
    end
    all = all and allowed
  until last == 1
  if all then
    for s = 0, 6 * (ns - 1), 6 do
      if slow[s + 2] > 0 and slow[s + 3] then
        store(slow[s + 1], slow[s + 3], slow[s + 4], slow[s + 5], slow[s + 6], gnow)
      end
    end
  else
    for u = 0, 2 * (nu - 1), 2 do redis.call('INCRBY', undo[u + 1], -undo[u + 2]) end
  end
end
if n == 1 then return out[1] end
return out
