-- sluice: the lean script for ONE check (the common call), shared head.
--
-- The batch script (prelude.lua + every algorithm + runner.lua) runs its whole body
-- on every EVALSHA: it re-creates all five algorithms' functions and tables, builds a
-- table per check and dispatches through them: about 5 us of Redis CPU per call on
-- top of the Redis commands themselves (docs/benchmarks.md). A one-check decision of
-- an O(1) algorithm runs instead one of these scripts, built at build time as this
-- head + <algorithm>.lua + single_tail.lua (src/redis/embed_lua.cmake): straight-line
-- code on locals, no tables but the reply, no closures, no string.format.
--
-- <algorithm>.lua is the algorithm's one decision body, which the batch script also
-- wraps as DECIDE[id] (embed_lua.cmake), so a change is made once. A body reads the
-- locals key, limit, w, cap, init, cost, need, now, PAD (extra TTL in ms), mode (the
-- policy's on_change: false, 'r' or 'p'; always false here) and mw (max_wait in us; 0
-- here: checks with either go to the batch script), tried (what a lean script's first
-- command did already: fixed_window.lua, token_bucket.lua, gcra.lua; false here), solo
-- (the check is alone in its call or group, so it may write before it decides:
-- token_bucket.lua, gcra.lua), reads the state itself (GET, or a fixed window's INCRBY,
-- or the buckets' SET .. GET), and sets allowed, remaining, reset, retry, expires, and,
-- only when allowed with cost > 0, `state` (the new state to SET with its TTL) and
-- maybe `patch` and `patch_at` (the bytes to SETRANGE at that offset of the stored
-- state instead, when only they change and the key's TTL stays right) and, for a
-- token bucket that starts, `start` and `start_expires`; `undo`, a cost to give back
-- with INCRBY -undo if the decision (or its batch) is not committed (a fixed window's
-- counter, which INCRBY changed in place). It mirrors src/core/<algorithm>.cc operation for
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
local need, mode, mw, solo, tried = max(cost, 1), false, 0, true, false
local PAD = 0
if ARGV[1] ~= '' then PAD = 3600000 end
local allowed, remaining, reset, retry, state, expires, start, start_expires, patch, patch_at, undo
