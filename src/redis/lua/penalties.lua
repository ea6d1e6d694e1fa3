-- Penalties and blocks (issue #12: Limiter::Penalize, Policy::block_for), mirroring
-- src/core/penalties.cc and the in-process store's blocks (src/memory/memory_store.cc).
-- runner.lua calls FORCE[id] (each algorithm's, in its own file: prelude.lua) for a
-- check of kind 3 (a forced check: a penalty), and apply_block below for a check of a
-- policy with block_for (c.block, in us); plain checks never get here (they run the lean
-- one-check scripts or the coalesced one, which do not include this file).
--
-- A block is a key of its own: the state key + ':b' (inside the same hash tag, so in
-- the same slot; declared in KEYS after the check's own, as c.bkey), holding the
-- block's end in us on the script's clock, with a TTL to then. Read and written only
-- by checks of a policy with block_for.

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
