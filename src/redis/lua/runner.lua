-- sluice: the group runner, the end of the batch script and of the coalesced one
-- (src/redis/embed_lua.cmake). One call carries one or more groups of checks (a
-- batch is one group; a coalesced call is several callers' batches); each group is
-- decided and committed before the next one is read, all or nothing within the group
-- and independent of the others: exactly what the same calls would have done one after
-- the other. The wire layout (docs/redis.md, "Wire layout"; redis_store.cc, Encode):
-- KEYS: every check's keys in order (the state key; a sliding log's ":log" key; the
--   ":b" block key of a policy with block_for).
-- ARGV[1]: "" (every group on Redis's TIME, read once: clock.lua) or "c" (each group
--   starts with its caller's now in us: caller-time mode, tests only).
-- ARGV[2]: extra TTL in ms (caller-time mode pads TTLs so that Redis's own expiry, on
--   its clock, cannot drop state the caller's clock still needs).
-- ARGV[3]: P, the call's distinct policies, then 7 numbers for each: algorithm, limit,
--   window (us), capacity, initial tokens (-1: full), on_change (0 as_is, 1 reset,
--   2 proportional), block_for (us, 0: none).
-- Then one number per check: (((cost' * 2 + big) * 16 + kind) * 4096 + policy) * 2 +
--   last, where policy indexes the list above from 0, last is 1 on the last check of
--   its group, big is 1 when the cost (>= 2^35) follows as an argument of its own
--   (cost' is then 0), and kind is what the check does (KIND below); kinds 1, 4, 5, 6
--   are followed by one more argument: max_wait (us) or the permit id ("": a peek);
--   kinds 7 and 8 by three: the overage bound (units; 0: overage reject), the usage
--   reservation id ("": none) and the record's lifetime (us; kind 7 only, else 0).
--   A check with a usage id declares its record key (the state key + ':u:' + id)
--   after its other keys.
-- Returns one flat array: for each check that decides (not a refund), ONE integer
-- ((reset_after * (capacity + 1)) + remaining) * 2 + 1 for an allowed decision with
-- nothing to wait (when below 2^53), else four: 2 (allowed) or 0 (denied), remaining,
-- reset_after, retry_after (negative: an allowed reservation's wait), or five when the
-- first has 4 added: then the units charged (Decision::charged) follow. redis/reply.cc
-- DecodeDecisions reads it. A settle whose record is unknown or expired answers the
-- error 'NOTFOUND ...' and changes nothing.
-- KIND: 0 decide, 1 decide with max_wait, 2 refund, 3 penalty (forced), 4 permit
-- acquire, 5 permit release, 6 permit extend, 7 decide under an overage or with a usage
-- record (src/core OverageBound; StoreCheck::usage_id), 8 settle (StoreOp::kSettle; a
-- group of settles only).
PAD = tonumber(ARGV[2])
local np = tonumber(ARGV[3])
-- The policies' numbers, flat: policy i's j-th (1..7) at pol[7 * i + j].
local pol = {}
for i = 1, 7 * np do pol[i] = tonumber(ARGV[3 + i]) end
local caller_time = ARGV[1] ~= ''
local out, n = {}, 0
local checks = {}
-- The pending writes of a group's inline checks (below), flat and reused from group to
-- group, 9 per check: key, cost, state, expires, patch, patch_at, start, start_expires,
-- undo.
local pend = {}

-- What an uncommitted inline check still writes: its undo, or a token bucket's start.
local function unwind(key, cost, undo, start, start_expires, now)
  if undo then
    redis.call('INCRBY', key, -undo)
  elseif start and cost > 0 then
    redis.call('SET', key, start, 'PX', ttl_ms(start_expires, now))
  end
end

-- Writes a decision as five numbers from out[n + 1] (the first has 4 added: `charged`
-- follows); returns the new n.
local function emit5(n, allowed, remaining, reset, retry, charged)
  out[n + 1] = (allowed and 2 or 0) + 4
  out[n + 2] = remaining
  out[n + 3] = reset
  out[n + 4] = retry
  out[n + 5] = charged
  return n + 5
end

-- A denied check's overage charge (FORCE up to c.bound), then a peek, denied, its block
-- applied; written at out[at] as five numbers.
local function charge(c, now, at)
  c.charged = FORCE[c.alg](c, now)
  c.cost = 0
  local _, remaining, reset, retry = DECIDE[c.alg](c, now)
  if c.block then
    _, remaining, reset, retry = apply_block(c, now, false, false, remaining, reset, retry)
  end
  emit5(at - 1, false, remaining, reset, retry, c.charged)
end

-- A usage reservation's record (StoreCheck::usage_id): "<taken> <expires>", the
-- expiry on the script's clock (so caller-time mode expires it as the caller sees it),
-- "s" in front once settled.
local function record_usage(c, now, taken, settled)
  local expires = c.uexp or (now + c.uttl)
  redis.call('SET', c.ukey, settled .. int(taken) .. ' ' .. int(expires), 'PX',
    int(ttl_ms(expires, now)))
end

-- One settle (StoreOp::kSettle) of check c whose record was found (c.taken, c.settled):
-- above what was taken the rest is decided, and charged per the overage when it does
-- not fit; below it the difference is refunded; then the key as a peek. Mirrors
-- src/memory/settle.cc. Returns the decision: applied, remaining, reset, retry, charged.
local function settle_one(c, now)
  local applied, actual = not c.settled, c.cost
  local _, remaining, reset, retry
  local charged = 0
  if applied and actual > c.taken and (actual - c.taken <= c.cap or c.bound > 0) then
    c.cost = actual - c.taken
    local allowed
    allowed, remaining, reset, retry = DECIDE[c.alg](c, now)
    if c.bound > 0 and c.cost > c.cap then allowed = false end
    if c.block then
      allowed, remaining, reset, retry = apply_block(c, now, false, allowed, remaining, reset, retry)
    end
    if allowed then
      COMMIT[c.alg](c, now)
    else
      if c.undo then redis.call('INCRBY', c.key, -c.undo) end
      if c.start then redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, now))) end
      if c.bound > 0 then
        c.charged = FORCE[c.alg](c, now)
        charged = c.charged
        c.cost = 0
        _, remaining, reset, retry = DECIDE[c.alg](c, now)
        if c.block then
          _, remaining, reset, retry = apply_block(c, now, false, false, remaining, reset, retry)
        end
      end
    end
  else
    if applied and actual < c.taken then REFUND[c.alg](c, now, c.taken - actual) end
    c.cost = 0
    local allowed
    allowed, remaining, reset, retry = DECIDE[c.alg](c, now)
    if c.block then
      _, remaining, reset, retry = apply_block(c, now, false, allowed, remaining, reset, retry)
    end
  end
  if applied then record_usage(c, now, c.taken, 's') end
  return applied, remaining, reset, retry, charged
end

-- A group of settles: every record first (one unknown or expired: nothing is applied,
-- settle_missing says which), then each check on its own. Returns the new n, or nil.
local settle_missing
local function settle_group(nc, now, n)
  for i = 1, nc do
    local c = checks[i]
    local raw = redis.call('GET', c.ukey)
    local s, tk, ex
    if raw then s, tk, ex = string.match(raw, '^(s?)(%d+) (%-?%d+)$') end
    if not tk or tonumber(ex) <= now then
      settle_missing = "NOTFOUND usage reservation '" .. c.uid ..
        "' is unknown or expired (nothing was settled)"
      return nil
    end
    c.settled, c.taken, c.uexp = s == 's', tonumber(tk), tonumber(ex)
  end
  for i = 1, nc do
    n = emit5(n, settle_one(checks[i], now))
  end
  return n
end

local settles = false -- the group being read is one of settles (kind 8)
local a, k, nargs = 4 + 7 * np, 1, #ARGV
while a <= nargs do
  local gnow = now
  if caller_time then
    gnow = tonumber(ARGV[a])
    a = a + 1
  end
  local nc, ni, all, consumes, last = 0, 0, true, false, 0
  repeat
    local v = tonumber(ARGV[a])
    a = a + 1
    last = v % 2
    v = (v - last) / 2
    local pi = v % 4096
    v = (v - pi) / 4096
    local kind = v % 16
    v = (v - kind) / 16
    local big = v % 2
    local cost = (v - big) / 2
    if big == 1 then
      cost = tonumber(ARGV[a])
      a = a + 1
    end
    local mw, op, permit, bound, uid, uttl = 0, nil, nil, 0, false, 0
    if kind == 1 then
      mw = tonumber(ARGV[a])
      a = a + 1
    elseif kind >= 7 then
      bound, uid, uttl = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
      a = a + 3
      if uid == '' then uid = false end
    elseif kind >= 4 then
      op, permit = kind == 4 and 'a' or kind == 5 and 'r' or 'x', ARGV[a]
      a = a + 1
    end
    local pb = 7 * pi
    local alg, om, block = pol[pb + 1], pol[pb + 6], pol[pb + 7]
    local mode = om == 1 and 'r' or om == 2 and 'p' or false
    if kind <= 1 and alg ~= 1 and alg ~= 5 and block == 0 then
      -- An O(1) algorithm's decision, inline: its body (<algorithm>.lua) on locals, no
      -- table, no closure (embed_lua.cmake puts the bodies here).
      local key, limit, w, cap, init = KEYS[k], pol[pb + 2], pol[pb + 3], pol[pb + 4], pol[pb + 5]
      k = k + 1
      local need, now, tried = max(cost, 1), gnow, false
      local solo = last == 1 and nc == 0 and ni == 0
      local allowed, remaining, reset, retry, state, expires, start, start_expires, patch,
        patch_at, undo
      --@INLINE@
      --@REPLY_PUT@
      if last == 1 and nc == 0 and ni == 0 then
        -- alone in its group (the common call): committed now, or not at all
        if allowed and cost > 0 then
          if state then write(key, state, expires, patch, patch_at, now) end
        else
          unwind(key, cost, undo, start, start_expires, now)
        end
        all = false -- (nothing left to commit)
      else
        local b = 9 * ni
        ni = ni + 1
        pend[b + 1], pend[b + 2], pend[b + 3], pend[b + 4], pend[b + 5] = key, cost, state,
          expires, patch
        pend[b + 6], pend[b + 7], pend[b + 8], pend[b + 9] = patch_at, start, start_expires, undo
        all = all and allowed
        consumes = consumes or cost > 0
      end
    else
      local c = {alg = alg, limit = pol[pb + 2], window = pol[pb + 3], cap = pol[pb + 4],
                 init = pol[pb + 5], cost = cost, mode = mode, mw = mw, op = op, permit = permit,
                 key = KEYS[k]}
      k = k + 1
      if alg == 1 then
        c.key2 = KEYS[k]
        k = k + 1
      end
      if block > 0 then -- a policy with block_for: its block key (penalties.lua)
        c.block = block
        c.bkey = KEYS[k]
        k = k + 1
      end
      c.bound, c.est, c.cost0 = bound, kind >= 7, cost -- overage (kinds 7, 8)
      if uid then -- a usage reservation's record key
        c.uid, c.uttl, c.ukey = uid, uttl, KEYS[k]
        k = k + 1
      end
      local decide = DECIDE[alg]
      if not decide then return redis.error_reply('sluice: unknown algorithm ' .. alg) end
      if kind == 2 then
        REFUND[alg](c, gnow, cost)
      elseif kind == 8 then
        nc = nc + 1 -- settled below, once every record of the group is found
        checks[nc] = c
        settles = true
      else
        -- Penalties and blocks (penalties.lua): a forced check takes its cost by force
        -- and answers with a peek at the state after it (cost 0 from here on, so it is
        -- not committed again); a policy with block_for applies its block.
        local forced = kind == 3
        if forced then
          c.bound = 2 * c.cap -- (src/core PenaltyBound)
          c.charged = FORCE[alg](c, gnow)
          c.cost = 0
        end
        local allowed, remaining, reset, retry = decide(c, gnow)
        if c.block then
          allowed, remaining, reset, retry = apply_block(c, gnow, forced, allowed, remaining,
            reset, retry)
        end
        nc = nc + 1
        checks[nc] = c
        if c.bound > 0 and c.cost > 0 then
          -- a check that charges if its group is denied: five numbers, rewritten then
          c.at = n + 1
          n = emit5(n, allowed, remaining, reset, retry, 0)
        elseif forced and c.charged > 0 then
          n = emit5(n, allowed, remaining, reset, retry, c.charged)
        elseif allowed and retry == 0 and remaining >= 0 and remaining <= c.cap and reset >= 0 and
            (reset * (c.cap + 1) + remaining) * 2 + 1 < 9007199254740992 then
          n = n + 1
          out[n] = (reset * (c.cap + 1) + remaining) * 2 + 1
        else
          out[n + 1] = allowed and 2 or 0
          out[n + 2] = remaining
          out[n + 3] = reset
          out[n + 4] = retry
          n = n + 4
        end
        -- (c.solo: a permit's release or extend, applied on its own: lua/concurrency.lua)
        if not c.solo then
          all = all and allowed
          consumes = consumes or c.cost > 0
        end
      end
    end
  until last == 1
  if settles then
    n = settle_group(nc, gnow, n)
    if not n then return redis.error_reply(settle_missing) end
    settles, all, consumes, nc = false, false, false, 0 -- (nothing left to commit or record)
  end
  if all and consumes then
    for b = 0, 9 * (ni - 1), 9 do
      if pend[b + 2] > 0 and pend[b + 3] then
        write(pend[b + 1], pend[b + 3], pend[b + 4], pend[b + 5], pend[b + 6], gnow)
      end
    end
    for i = 1, nc do
      local c = checks[i]
      if c.cost > 0 then COMMIT[c.alg](c, gnow) end
    end
  else
    -- Not committed: what a decision changed in place is undone (fixed_window.lua's
    -- counter), and a new token bucket with initial tokens below its capacity starts
    -- anyway (token_bucket.lua's start; src/core/token_bucket.cc).
    for b = 0, 9 * (ni - 1), 9 do
      unwind(pend[b + 1], pend[b + 2], pend[b + 9], pend[b + 7], pend[b + 8], gnow)
    end
    for i = 1, nc do
      local c = checks[i]
      if c.undo then redis.call('INCRBY', c.key, -c.undo) end
      if c.start and c.cost > 0 then
        redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, gnow)))
      end
    end
    -- Overage (src/core OverageBound): the denied group's charging checks take per
    -- their rule, each answered with a peek after its charge, denied.
    for i = 1, nc do
      local c = checks[i]
      if c.at then charge(c, gnow, c.at) end
    end
  end
  -- Usage reservations: what each check took, recorded under its id.
  for i = 1, nc do
    local c = checks[i]
    if c.uid then
      record_usage(c, gnow, (all and consumes) and c.cost0 or (c.charged or 0), '')
    end
  end
end
flush_logs()
return out
