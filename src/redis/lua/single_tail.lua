-- The end of every one-check script of an O(1) algorithm: write what the algorithm's
-- body decided (the bytes of the stored state that change, or its new state, when
-- allowed with a cost, or a token bucket's started state), a new state with its TTL, ceil((expires - now) / 1 ms), at least 1 ms (prelude.lua's
-- ttl_ms; Lua numbers given to redis.call are sent exactly, as "%.17g").
-- A patch falls back to the SET when SETRANGE is refused (an ACL user set up from the
-- documented line of a version that did not use it).
if undo and not allowed then
  redis.call('INCRBY', key, -undo) -- a denial consumes nothing
elseif patch and type(redis.pcall('SETRANGE', key, patch_at, patch)) == 'number' then
  -- written
elseif state or start then
  if not state then state, expires = start, start_expires end
  local ms = ceil((expires - now) / 1000)
  if ms < 1 then ms = 1 end
  ms = ms + PAD
  redis.call('SET', key, state, 'PX', ms)
end
-- The reply. An allowed decision (retry_after 0, which only allowed ones have) is ONE
-- integer, ((reset_after * (capacity + 1)) + remaining) * 2 + 1, when it is below
-- 2^53 (exact in a double): a Lua table reply costs Redis about 0.5 us more
-- (src/redis/reply.cc DecodeDecisions unpacks it with the capacity it sent). Any other
-- decision is the batch script's four integers: 2 (allowed) or 0, remaining, reset_after,
-- retry_after (lua/runner.lua: the one reply encoding of every script).
if allowed and retry == 0 and remaining >= 0 and remaining <= cap and reset >= 0 then
  local v = (reset * (cap + 1) + remaining) * 2 + 1
  if v < 9007199254740992 then return v end
end
return {allowed and 2 or 0, remaining, reset, retry}
