-- sluice: the lean script for ONE check (the common call), shared head.
--
-- The batch script (prelude.lua + every algorithm + dispatch.lua) runs its whole body
-- on every EVALSHA: it re-creates all five algorithms' functions and tables, builds a
-- table per check and dispatches through them: about 5 us of Redis CPU per call on
-- top of the Redis commands themselves (docs/benchmarks.md). A one-check decision of
-- an O(1) algorithm runs instead one of these scripts, built at build time as this
-- head + <algorithm>.lua + single_tail.lua (src/redis/embed_lua.cmake): straight-line
-- code on locals, no tables but the reply, no closures, no string.format.
--
-- <algorithm>.lua is the algorithm's one decision body, which the batch script also
-- wraps as DECIDE[id] (embed_lua.cmake), so a change is made once. A body reads the
-- locals key, limit, w, cap, init, cost, need, raw (the GET of the state, or false)
-- and now, and x (the check's extensions, prelude.lua's parse_ext: always false here,
-- since a check with extensions goes to the batch script), and sets allowed, remaining, reset, retry, expires, and, only when allowed
-- with cost > 0, `state` (the new state to SET with its TTL) and maybe `patch` and
-- `patch_at` (the bytes to SETRANGE at that offset of the stored state instead, when
-- only they change and the key's TTL stays right) and, for a token bucket that
-- starts, `start` and `start_expires`. It mirrors src/core/<algorithm>.cc operation for
-- operation (IEEE doubles in the same order, the same epsilon, the same ceil/floor);
-- the differential test holds both scripts to the in-process store.
--
-- Arguments (fewer than the batch script's: each ARGV costs Redis about 0.08 us):
-- KEYS[1]: the state key. ARGV[1]: "" (Redis's clock) or the caller's now (us, tests
-- only: TTLs are then padded by an hour, as the batch script's ARGV[2] = 3600000);
-- ARGV[2]: limit; ARGV[3]: window (us); ARGV[4]: cost (0: peek); ARGV[5]: capacity
-- (token bucket and GCRA only; otherwise the limit); ARGV[6]: initial tokens (token
-- bucket only; -1: full). See EncodeSingle in src/redis/redis_store.cc.
-- The reply: see single_tail.lua. `now` comes from clock.lua, which every script starts with.
local EPS = 1e-9
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local key = KEYS[1]
local limit, w, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cap, init = limit, -1
if ARGV[5] then cap = tonumber(ARGV[5]) end
if ARGV[6] then init = tonumber(ARGV[6]) end
local need, x = max(cost, 1), false
local allowed, remaining, reset, retry, state, expires, start, start_expires, patch, patch_at
-- The state, or false when the key is absent. A state is used only if it has this
-- algorithm's layout (docs/redis.md, "Key layout").
local raw = redis.call('GET', key)
