-- sluice: the lean fixed-window script (issue #18). A call whose checks are all plain
-- fixed-window decisions (redis_store.cc, LeanFixedWindow in script_wire.cc: a policy
-- with on_change as_is, no block_for, a limit below 2^31, cost <= limit, kind decide)
-- runs this instead of the group runner: one check, a batch, or several callers'
-- batches coalesced into one call, each group all or nothing and decided before the
-- next is read (docs/redis.md, "Coalesced calls"). Per decision the work is ONE
-- `INCRBY key cost` on the counter (fixed_window.lua, "the counter"): its reply is the
-- state after it, and its tag says whether the count is this window's. Only a fresh
-- window (an absent key, or another window's count) adds a `SET ... PX` (the counter
-- whole, with its TTL), and a denial, or a group that another check denied, an
-- `INCRBY key -cost`: no table per check, and no functions defined but write_state.lua's
-- and decide_body (each closure is created on every call).
-- A key that INCRBY cannot add to (the packed layout of earlier versions during a
-- rolling upgrade, another algorithm's state, an ACL line without +incrby) and a peek
-- (cost 0) are decided by fixed_window.lua's body itself, wrapped below as
-- `decide_body` (embed_lua.cmake), which reads every layout; its writes wait for the
-- group, as the runner's do (write_state.lua's `write`).
--
-- The wire layout (docs/redis.md, "Wire layout"; script_wire.cc, EncodeLeanFixedWindow):
-- KEYS: every check's key, group after group.
-- ARGV[1]: "" (Redis's TIME, read once per call: clock.lua) or "c" (caller time, tests
--   only: each group starts with its now, and TTLs are padded by an hour).
-- ARGV[2]: P, the call's distinct policies, then 2 numbers each: limit, window (us).
-- Then per check ONE number, (cost * 4096 + policy) * 2 + last, policy indexing the
--   list from 0, last 1 on a group's last check.
-- The reply: the runner's encoding (lua/runner.lua), one flat array, check after check;
-- a call of one check answered by one integer: that integer alone.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local caller_time = ARGV[1] ~= ''
local PAD = 0
if caller_time then PAD = 3600000 end
--@DECIDE_BODY@
local np = tonumber(ARGV[2])
local pol = {}
for i = 1, 2 * np do pol[i] = tonumber(ARGV[2 + i]) end
local out, n = {}, 0
-- A group's applied INCRBYs (key, cost), to give back if the group is denied, and its
-- body-decided checks' writes (key, cost, state, expires, patch, patch_at), made only
-- if it is allowed; flat, reused from group to group.
local undo, slow = {}, {}
local a, k, nargs = 3 + 2 * np, 1, #ARGV
while a <= nargs do
  local gnow = now
  if caller_time then
    gnow = tonumber(ARGV[a])
    a = a + 1
  end
  local nu, ns, all, first, last = 0, 0, true, true, 0
  repeat
    local v = tonumber(ARGV[a])
    a = a + 1
    last = v % 2
    v = (v - last) / 2
    local pi = v % 4096
    local cost = (v - pi) / 4096
    local limit, w = pol[2 * pi + 1], pol[2 * pi + 2]
    local key = KEYS[k]
    k = k + 1
    local solo = first and last == 1
    first = false
    local allowed, remaining, reset, retry
    local c = cost > 0 and redis.pcall('INCRBY', key, cost)
    if type(c) == 'number' then
      -- the counter after this decision (fixed_window.lua, read through INCRBY)
      local r = math.fmod(gnow, w) -- floor_to(now, w), exact below 2^53
      if r < 0 then r = r + w end
      local ws = gnow - r
      local old = c - cost
      local otag = floor(old / 4294967296)
      local d = (otag - 1048576 - (ws / w) % 1048576) % 1048576
      local count = 0
      if otag >= 1048576 and otag < 2097152 and d < 524288 then
        -- this window (d == 0), or a later one the clock went back from: keep it
        ws, count = ws + d * w, old - otag * 4294967296
      else
        -- a fresh window (absent or stale key): INCRBY wrote the bare cost, so the
        -- counter is written whole, with its TTL (cost <= limit: always allowed)
        redis.call('SET', key, (1048576 + (ws / w) % 1048576) * 4294967296 + cost, 'PX',
          ceil((ws + w - gnow) / 1000) + PAD)
      end
      local t = max(gnow, ws)
      allowed = count + cost <= limit
      retry = 0
      if allowed then
        count = count + cost
      else
        retry = ws + w - t
      end
      reset = ws + w - t -- (count > 0: it holds this cost or more)
      remaining = max(0, limit - count)
      if solo then
        if not allowed then redis.call('INCRBY', key, -cost) end -- denials consume nothing
      else
        undo[2 * nu + 1], undo[2 * nu + 2] = key, cost
        nu = nu + 1
      end
    else
      local state, expires, patch, patch_at, u
      allowed, remaining, reset, retry, state, expires, patch, patch_at, u =
        decide_body(key, limit, w, cost, gnow, cost > 0)
      if solo then
        if allowed and cost > 0 and state then write(key, state, expires, patch, patch_at, gnow) end
      else
        local b = 6 * ns
        slow[b + 1], slow[b + 2], slow[b + 3], slow[b + 4], slow[b + 5], slow[b + 6] = key, cost,
          state or false, expires, patch or false, patch_at
        ns = ns + 1
      end
    end
    if allowed and retry == 0 and remaining >= 0 and remaining <= limit and reset >= 0 and
        (reset * (limit + 1) + remaining) * 2 + 1 < 9007199254740992 then
      n = n + 1
      out[n] = (reset * (limit + 1) + remaining) * 2 + 1
    else
      out[n + 1] = allowed and 2 or 0
      out[n + 2] = remaining
      out[n + 3] = reset
      out[n + 4] = retry
      n = n + 4
    end
    all = all and allowed
  until last == 1
  if all then
    for b = 0, 6 * (ns - 1), 6 do
      if slow[b + 2] > 0 and slow[b + 3] then
        write(slow[b + 1], slow[b + 3], slow[b + 4], slow[b + 5], slow[b + 6], gnow)
      end
    end
  else
    for b = 0, 2 * (nu - 1), 2 do redis.call('INCRBY', undo[b + 1], -undo[b + 2]) end
  end
end
if n == 1 then return out[1] end
return out
