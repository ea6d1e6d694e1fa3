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
-- Then one number per check: (((cost' * 2 + big) * 8 + kind) * 4096 + policy) * 2 +
--   last, where policy indexes the list above from 0, last is 1 on the last check of
--   its group, big is 1 when the cost (>= 2^36) follows as an argument of its own
--   (cost' is then 0), and kind is what the check does (KIND below); kinds 1, 4, 5, 6
--   are followed by one more argument: max_wait (us) or the permit id ("": a peek).
-- Returns one flat array: for each check that decides (not a refund), ONE integer
-- ((reset_after * (capacity + 1)) + remaining) * 2 + 1 for an allowed decision with
-- nothing to wait (when below 2^53), else four: 2 (allowed) or 0 (denied), remaining,
-- reset_after, retry_after (negative: an allowed reservation's wait). redis/reply.cc
-- DecodeDecisions reads it.
-- KIND: 0 decide, 1 decide with max_wait, 2 refund, 3 penalty (forced), 4 permit
-- acquire, 5 permit release, 6 permit extend.
PAD = tonumber(ARGV[2])
local np = tonumber(ARGV[3])
local pol = {}
for i = 0, np - 1 do
  local b = 4 + 7 * i
  pol[i] = {tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
            tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]),
            tonumber(ARGV[b + 6])}
end
local MODES = {[1] = 'r', [2] = 'p'}
local OPS = {[4] = 'a', [5] = 'r', [6] = 'x'}
local caller_time = ARGV[1] ~= ''
local out, n = {}, 0
local checks = {}
-- The pending writes of a group's inline checks (below), in flat arrays reused from
-- group to group: key, cost, state, expires, patch, patch_at, start, start_expires, undo.
local PK, PC, PS, PE, PP, PA, PT, PX, PU = {}, {}, {}, {}, {}, {}, {}, {}, {}

-- Writes an inline check's state (prelude.lua's store_word, without a table).
local function write(key, state, expires, patch, patch_at, now)
  if patch and type(redis.pcall('SETRANGE', key, patch_at, patch)) == 'number' then return end
  redis.call('SET', key, state, 'PX', ttl_ms(expires, now))
end

-- What an uncommitted inline check still writes: its undo, or a token bucket's start.
local function unwind(key, cost, undo, start, start_expires, now)
  if undo then
    redis.call('INCRBY', key, -undo)
  elseif start and cost > 0 then
    redis.call('SET', key, start, 'PX', ttl_ms(start_expires, now))
  end
end

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
    local kind = v % 8
    v = (v - kind) / 8
    local big = v % 2
    local cost = (v - big) / 2
    if big == 1 then
      cost = tonumber(ARGV[a])
      a = a + 1
    end
    local mw, op, permit = 0, nil, nil
    if kind == 1 then
      mw = tonumber(ARGV[a])
      a = a + 1
    elseif kind >= 4 then
      op, permit = OPS[kind], ARGV[a]
      a = a + 1
    end
    local p = pol[pi]
    local alg = p[1]
    if kind <= 1 and alg ~= 1 and alg ~= 5 and p[7] == 0 then
      -- An O(1) algorithm's decision, inline: its body (<algorithm>.lua) on locals, no
      -- table, no closure (embed_lua.cmake puts the bodies here).
      local key, limit, w, cap, init = KEYS[k], p[2], p[3], p[4], p[5]
      k = k + 1
      local need, mode, now = max(cost, 1), MODES[p[6]] or false, gnow
      local solo = last == 1 and nc == 0 and ni == 0
      local allowed, remaining, reset, retry, state, expires, start, start_expires, patch,
        patch_at, undo
      --@INLINE@
      if allowed and retry == 0 and remaining >= 0 and remaining <= cap and reset >= 0 and
          (reset * (cap + 1) + remaining) * 2 + 1 < 9007199254740992 then
        n = n + 1
        out[n] = (reset * (cap + 1) + remaining) * 2 + 1
      else
        out[n + 1] = allowed and 2 or 0
        out[n + 2] = remaining
        out[n + 3] = reset
        out[n + 4] = retry
        n = n + 4
      end
      if last == 1 and nc == 0 and ni == 0 then
        -- alone in its group (the common call): committed now, or not at all
        if allowed and cost > 0 then
          if state then write(key, state, expires, patch, patch_at, now) end
        else
          unwind(key, cost, undo, start, start_expires, now)
        end
        all = false -- (nothing left to commit)
      else
        ni = ni + 1
        PK[ni], PC[ni], PS[ni], PE[ni], PP[ni], PA[ni] = key, cost, state, expires, patch, patch_at
        PT[ni], PX[ni], PU[ni] = start, start_expires, undo or false
        all = all and allowed
        consumes = consumes or cost > 0
      end
    else
      local c = {alg = alg, limit = p[2], window = p[3], cap = p[4], init = p[5], cost = cost,
                 mode = MODES[p[6]] or false, mw = mw, op = op, permit = permit, key = KEYS[k]}
      k = k + 1
      if alg == 1 then
        c.key2 = KEYS[k]
        k = k + 1
      end
      if p[7] > 0 then -- a policy with block_for: its block key (penalties.lua)
        c.block = p[7]
        c.bkey = KEYS[k]
        k = k + 1
      end
      local decide = DECIDE[alg]
      if not decide then return redis.error_reply('sluice: unknown algorithm ' .. alg) end
      if kind == 2 then
        REFUND[alg](c, gnow, cost)
      else
        -- Penalties and blocks (penalties.lua): a forced check takes its cost by force
        -- and answers with a peek at the state after it (cost 0 from here on, so it is
        -- not committed again); a policy with block_for applies its block.
        local forced = kind == 3
        if forced then
          FORCE[alg](c, gnow)
          c.cost = 0
        end
        local allowed, remaining, reset, retry = decide(c, gnow)
        if c.block then
          allowed, remaining, reset, retry = apply_block(c, gnow, forced, allowed, remaining,
            reset, retry)
        end
        nc = nc + 1
        checks[nc] = c
        if allowed and retry == 0 and remaining >= 0 and remaining <= c.cap and reset >= 0 and
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
  if all and consumes then
    for i = 1, ni do
      if PC[i] > 0 and PS[i] then write(PK[i], PS[i], PE[i], PP[i], PA[i], gnow) end
    end
    for i = 1, nc do
      local c = checks[i]
      if c.cost > 0 then COMMIT[c.alg](c, gnow) end
    end
  else
    -- Not committed: what a decision changed in place is undone (fixed_window.lua's
    -- counter), and a new token bucket with initial tokens below its capacity starts
    -- anyway (token_bucket.lua's start; src/core/token_bucket.cc).
    for i = 1, ni do unwind(PK[i], PC[i], PU[i], PT[i], PX[i], gnow) end
    for i = 1, nc do
      local c = checks[i]
      if c.undo then redis.call('INCRBY', c.key, -c.undo) end
      if c.start and c.cost > 0 then
        redis.call('SET', c.key, c.start, 'PX', int(ttl_ms(c.start_expires, gnow)))
      end
    end
  end
end
flush_logs()
return out
