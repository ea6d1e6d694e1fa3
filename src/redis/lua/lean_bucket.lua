-- sluice: the lean bucket script (issue #18). A call whose checks are all plain GCRA,
-- token-bucket or sliding-counter decisions (LeanBucket in script_wire.cc: a policy with
-- on_change as_is, no block_for, a token bucket that starts full, kind decide, no usage
-- record) runs this instead of the group runner: a batch of two or more checks, or
-- several callers' calls coalesced into one call, each group all or nothing and decided
-- before the next is read (docs/redis.md, "Coalesced calls").
-- A check alone in its group whose cost a fresh state allows costs ONE command (a
-- sliding counter's while the call's keys so far were mostly fresh: `lead`): `SET key
-- <guess> PX <ttl> GET` writes the state a fresh key would get (gcra.lua's,
-- token_bucket.lua's and sliding_window_counter.lua's guess: a TAT, a full bucket less
-- the cost, this window's count of the cost alone) and replies the state it replaced;
-- absent, or back to full (a TAT passed, a bucket's expiry reached, a sliding counter's
-- windows both gone by), that is the whole decision. What a check needs besides (the
-- guess and its TTL as strings, the reply of a fresh decision) is worked out once per
-- call for each policy, so such a check builds no table. Any other state it replaced (a
-- live one, an earlier layout, a foreign value), a check in a group of several, a peek
-- and a cost a fresh state does not allow are decided by the algorithm's body itself,
-- wrapped below as `decide_body` (embed_lua.cmake): given the state the SET replaced
-- (`tried`), it decides on it and writes the right state, or puts back what the guess
-- overwrote; in a group of several it reads with GET and its write waits for the group,
-- as the runner's does (write_state.lua's `write`, here `store`).
--
-- The wire layout (docs/redis.md, "Wire layout"; script_wire.cc, EncodeLean):
-- KEYS: every check's key, group after group.
-- ARGV[1]: "" (Redis's TIME, read once per call: clock.lua) or "c" (caller time, tests
--   only: each group starts with its now, and TTLs are padded by an hour).
-- ARGV[2]: P, the call's distinct policies, then 6 arguments each: limit, window (us),
--   cost, algorithm (2 sliding counter, 3 token bucket, 4 GCRA), capacity, initial
--   tokens (-1: full).
-- Then per check ONE number, policy * 2 + last, policy indexing the list from 0, last
--   1 on a group's last check; none when P is 0, which says that the call has ONE
--   policy and every check is alone in its group (the common coalesced call: each
--   argument is one more for Redis to parse and for the script to read).
-- The reply: the runner's encoding (lua/runner.lua), one flat array, check after check;
-- a call of one check answered by one integer: that integer alone.
local floor, ceil, max, min, type = math.floor, math.ceil, math.max, math.min, type
local EPS = 1e-9 -- (prelude.lua's)
--@LEAN_HEAD@
-- The slow path's functions: write_state.lua's `write` (as `store`) and decide_body,
-- created by the first check that needs them.
local store, decide_body
-- Policy i's numbers at pol[11 * i + 1 ..]: 1 limit, 2 window, 3 cost, 4 algorithm, 5
-- capacity, 6 initial tokens, then for the now at hand: 7 the guess (a fresh state after
-- this cost), or false when a fresh state does not allow the cost, 8 its TTL in ms as a
-- string, 9 remaining and 10 reset_after of a fresh decision, 11 its packed reply
-- (false: too large to pack).
local pol = {}
for i = 0, np - 1 do
  local b, a = 11 * i, 3 + 6 * i
  for j = 1, 6 do pol[b + j] = tonumber(ARGV[a + j - 1]) end
end
local out, n = {}, 0
-- A group's body-decided writes (key, state, expires, patch, patch_at), made only if it
-- is allowed; flat, reused from group to group.
local pend = {}
-- `lead`: the call's lone sliding-counter checks so far that found a fresh state, less
-- those that found a live one (counted from -4 to 4). From 0 up such a check writes
-- first; below, it reads first (GET, then a SETRANGE of its count): a state lives two
-- windows, so on a key seen about once a window the guess would mostly be written twice.
local a, k, nkeys, pnow, lead = 3 + 6 * np, 1, #KEYS, false, 0
while k <= nkeys do
  --@LEAN_GROUP_NOW@
  if gnow ~= pnow then -- (every group in caller-time mode; once on Redis's clock)
    pnow = gnow
    for b = 0, 11 * (np - 1), 11 do
      -- the body's decision on a fresh state, in its operations' order
      local limit, w, cost, alg, cap = pol[b + 1], pol[b + 2], pol[b + 3], pol[b + 4], pol[b + 5]
      local need = max(cost, 1)
      local guess, remaining, reset, ms = false, 0, 0, 0
      if alg == 4 then -- gcra.lua: tat = now
        local interval = w / limit
        local tau = interval * cap
        local tat = gnow + need * interval
        if cost > 0 and tat - gnow <= tau + EPS * interval then
          guess, remaining, reset = string.format('%.17g', tat),
            max(0, floor((tau - (tat - gnow)) / interval + EPS)), ceil(tat - gnow)
          ms = ceil((ceil(tat) - gnow) / 1000) + PAD
        end
      elseif alg == 3 then
        if cost > 0 and pol[b + 6] < 0 and cap + EPS >= need then -- token_bucket.lua: full
          local tokens = max(0, cap - cost)
          if not (tokens + EPS >= cap) then reset = ceil((cap - tokens) / (limit / w)) end
          guess, remaining = struct.pack('<Bddd', 3, gnow + reset, tokens, gnow),
            max(0, floor(tokens + EPS))
          ms = max(1, ceil(reset / 1000)) + PAD
        end
      elseif cost > 0 and need <= limit + EPS then -- sliding_window_counter.lua: no counts
        local r = math.fmod(gnow, w)
        if r < 0 then r = r + w end
        local ws = gnow - r
        guess, remaining, reset = struct.pack('<Bdddd', 2, ws + 2 * w, ws, cost, 0),
          max(0, floor(limit - cost + EPS)), ws + 2 * w - gnow
        ms = max(1, ceil(reset / 1000)) + PAD
      end
      pol[b + 7] = guess
      if guess then
        local v = (reset * (cap + 1) + remaining) * 2 + 1
        pol[b + 8], pol[b + 9], pol[b + 10] = string.format('%d', ms), remaining, reset
        pol[b + 11] = remaining <= cap and v < 9007199254740992 and v
      end
    end
  end
  local ns, all, first, last = 0, true, true, 0
  repeat
    --@LEAN_CHECK@
    local b = 11 * (v - last) / 2
    local key = KEYS[k]
    k = k + 1
    local cost, alg, cap, guess = pol[b + 3], pol[b + 4], pol[b + 5], pol[b + 7]
    local raw, fresh = false, false
    local write = solo and guess and (alg ~= 2 or lead >= 0)
    if write then
      raw = redis.pcall('SET', key, guess, 'PX', pol[b + 8], 'GET')
      if not raw then
        fresh = true
      elseif type(raw) == 'string' then
        -- back to full, like absent: a TAT passed, a bucket's expiry reached, a sliding
        -- counter's expiry reached
        if alg == 4 then
          local stat = tonumber(raw)
          fresh = stat ~= nil and ceil(stat) <= gnow
        elseif alg == 3 then
          if #raw == 25 and string.byte(raw) == 3 then
            local _, e = struct.unpack('<Bd', raw)
            fresh = e <= gnow
          end
        elseif #raw == 33 and string.byte(raw) == 2 then
          -- (or both its windows before the one before now's, which count for nothing)
          local _, e, sws = struct.unpack('<Bdd', raw)
          local w = pol[b + 2]
          local r = math.fmod(gnow, w)
          if r < 0 then r = r + w end
          fresh = e <= gnow or (sws < gnow - r - w)
        end
      end
    end
    local allowed = true
    if fresh then
      if alg == 2 and lead < 4 then lead = lead + 1 end
      local packed = pol[b + 11]
      if packed then
        n = n + 1
        out[n] = packed
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, pol[b + 9], pol[b + 10], 0
        n = n + 4
      end
    else
      -- the algorithm's body decides: on what the SET replaced (solo), or reading it
      --@DECIDE_BODY@
      -- (a SET refused, e.g. by a key of another type, wrote nothing: the body reads)
      local replaced = type(raw) == 'string'
      local remaining, reset, retry, state, expires, patch, patch_at
      allowed, remaining, reset, retry, state, expires, patch, patch_at =
        decide_body(alg, key, pol[b + 1], pol[b + 2], cap, pol[b + 6], cost, gnow,
          solo and (replaced or not raw), replaced and raw)
      if alg == 2 and solo and guess then
        -- (read first: a fresh state's decision says it found one)
        if not write and remaining == pol[b + 9] and reset == pol[b + 10] and allowed then
          if lead < 4 then lead = lead + 1 end
        elseif lead > -4 then
          lead = lead - 1
        end
      end
      if solo then
        if allowed and cost > 0 and state then store(key, state, expires, patch, patch_at, gnow) end
      elseif allowed and cost > 0 and state then
        local s = 5 * ns
        pend[s + 1], pend[s + 2], pend[s + 3], pend[s + 4], pend[s + 5] = key, state, expires,
          patch or false, patch_at
        ns = ns + 1
      end
      --@REPLY_PUT@
    end
    all = all and allowed
  until last == 1
  if all then
    for s = 0, 5 * (ns - 1), 5 do
      store(pend[s + 1], pend[s + 2], pend[s + 3], pend[s + 4], pend[s + 5], gnow)
    end
  end
end
if n == 1 then return out[1] end
return out
