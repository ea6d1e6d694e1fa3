-- sluice: one script decides a batch of limit checks atomically.
--
-- Built at build time by concatenating clock.lua, prelude.lua, one part per algorithm,
-- penalties.lua and runner.lua (src/redis/embed_lua.cmake). Each algorithm has
-- DECIDE[id](c, now), which reads the check's state and returns the decision
-- (allowed, remaining, reset_after, retry_after) without consuming anything, and
-- COMMIT[id](c, now), which writes what DECIDE computed. For the O(1) algorithms both
-- are generated around the algorithm's one decision body (<algorithm>.lua, shared with
-- its one-check script); the sliding log's file defines them itself. runner.lua decides every
-- check first and commits all of them only if all allow (all or nothing).
-- REFUND[id](c, now, cost) gives cost back to an existing state (Store::Refund: a batch
-- of kind-2 checks, and then nothing is decided). FORCE[id](c, now) takes c.cost by
-- force (a penalty, or an overage charge), bounded so that a key's usage stays at most
-- c.bound units (a penalty: twice its capacity; an overage: capacity + debt, src/core
-- OverageBound): window counts <= bound (the sliding counter's estimate for an
-- overage, c.est), tokens >= capacity - bound, TAT <= now + bound x T, log units <=
-- bound; it normalises the state first as a decision would, writes the new state and
-- returns the units it took; runner.lua then peeks (DECIDE with cost 0) for the decision.
-- Each algorithm's file owns its state codec and all of its operations: the decision
-- body, then (after its "--@OPERATIONS@" line, which embed_lua.cmake cuts at so that
-- the one-check scripts carry only the body) its REFUND and FORCE.
-- A call with ONE check runs a lean script of its own instead (single_head.lua);
-- the sliding log's is this prelude + sliding_window_log.lua + penalties.lua + runner.lua.
--
-- The batch script adds word_state.lua after this prelude: the packed layouts' codec
-- (load, pack_word, store_word) that only refunds, penalties and COMMIT use.
--
-- Every algorithm mirrors src/core/<algorithm>.cc operation for operation: IEEE
-- double arithmetic in the same order, the same epsilon, the same ceil/floor, so
-- decisions are identical to the in-process store. Numbers sent to Redis are
-- formatted with '%d' (integers) or given to redis.call as Lua numbers (which Redis
-- writes as "%.17g"); Lua's default "%.14g" would round timestamps. GCRA's state is its
-- TAT as such a number; the other O(1) algorithms' states are packed IEEE doubles
-- (struct.pack). Both read back bit for bit.
local EPS = 1e-9
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local DECIDE, COMMIT, REFUND, FORCE = {}, {}, {}, {}
local PAD = 0 -- extra TTL in ms (caller-time mode only, see runner.lua; write_state.lua)

-- An exact integer as a decimal string.
local function int(x)
  return string.format('%d', x)
end

-- Whole units of a double amount taken by a charge (src/core ChargedUnits).
local function charged_units(x)
  local whole = x + EPS
  if whole >= 1 then return floor(whole) end
  return 0
end
