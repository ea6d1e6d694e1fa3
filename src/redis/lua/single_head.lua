-- sluice: the lean script for ONE check (the common call), shared head.
--
-- The batch script (prelude.lua + every algorithm + dispatch.lua) runs its whole body
-- on every EVALSHA: it re-creates all five algorithms' functions and tables, builds a
-- table per check and dispatches through them: about 5 us of Redis CPU per call on
-- top of the Redis commands themselves, where these scripts take about 1.5
-- (docs/benchmarks.md). A one-check decision of
-- an O(1) algorithm runs instead one of these scripts, built at build time as this
-- head + <algorithm>.lua + single_tail.lua (src/redis/embed_lua.cmake): straight-line
-- code on locals, no tables but the reply, the state unpacked and packed with the
-- layout of that algorithm (prelude.lua's WORD).
--
-- <algorithm>.lua is the algorithm's one decision body, which the batch script also
-- wraps as DECIDE[id] (embed_lua.cmake), so a change is made once. A body reads the
-- locals key, limit, w, cap, init, cost, need, raw (the GET of the state, or false)
-- and now, and sets allowed, remaining, reset, retry, expires, and `state` (the packed
-- new state, only when allowed with cost > 0) and, for a token bucket that starts, `start`
-- and `start_expires`. It mirrors src/core/<algorithm>.cc operation for operation (IEEE
-- doubles in the same order, the same epsilon, the same ceil/floor); the differential
-- test holds both scripts to the in-process store.
-- KEYS[1]: the state key. ARGV[1]: "" (Redis's clock) or the caller's now (us);
-- ARGV[2]: extra TTL in ms; ARGV[3..8]: algorithm, limit, window (us), capacity,
-- initial tokens (-1: full), cost (0: peek).
-- `now` comes from clock.lua, which every script starts with.
local EPS = 1e-9
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local key = KEYS[1]
local limit, w, cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[8])
local cap, init = tonumber(ARGV[6]), tonumber(ARGV[7])
local need = max(cost, 1)
local allowed, remaining, reset, retry, state, expires, start, start_expires
-- The state, or false when the key is absent. A state is used only if its size and
-- first byte (the algorithm's id) are this algorithm's, as prelude.lua's load().
local raw = redis.call('GET', key)

-- Writes the new (packed) state with its TTL: ceil((expires - now) / 1 ms), at
-- least 1 ms, plus ARGV[2] (prelude.lua's ttl_ms).
local function store(state, expires)
  local ms = ceil((expires - now) / 1000)
  if ms < 1 then ms = 1 end
  redis.call('SET', key, state, 'PX', string.format('%d', ms + tonumber(ARGV[2])))
end
