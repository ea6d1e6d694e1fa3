-- sluice: one script decides a batch of limit checks atomically.
--
-- Built at build time by concatenating clock.lua, prelude.lua, one part per algorithm,
-- refunds.lua and dispatch.lua (src/redis/embed_lua.cmake). Each algorithm has
-- DECIDE[id](c, now), which reads the check's state and returns the decision
-- (allowed, remaining, reset_after, retry_after) without consuming anything, and
-- COMMIT[id](c, now), which writes what DECIDE computed. For the O(1) algorithms both
-- are generated around the algorithm's one decision body (<algorithm>.lua, shared with
-- its one-check script); the sliding log's file defines them itself. dispatch.lua decides every
-- check first and commits all of them only if all allow (all or nothing).
-- REFUND[id](c, now, cost) gives cost back to an existing state (Store::Refund; a call
-- sends every check's cost negated, and then nothing is decided).
-- A call with ONE check runs a lean script of its own instead (single_head.lua);
-- the sliding log's is this prelude + sliding_window_log.lua + dispatch.lua.
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
local DECIDE, COMMIT, REFUND = {}, {}, {}
local PAD = 0 -- extra TTL in ms (caller-time mode only, see dispatch.lua)

-- An exact integer as a decimal string.
local function int(x)
  return string.format('%d', x)
end

-- floor(t / unit) * unit, exact for integers below 2^53 (t may be negative).
local function floor_to(t, unit)
  local r = math.fmod(t, unit)
  if r < 0 then r = r + unit end
  return t - r
end

-- A check's extension argument (dispatch.lua's 7th per check): "" for a plain check,
-- else ';'-separated 'k=v' items that the features of docs/redis.md ("Check
-- extensions") read: w (max_wait, reservations), b and f (blocks, penalties), p and e
-- (permits), o and l (limit changes). Returns a table of the values as strings (the
-- feature converts them; a permit id is not a number), or false for "".
local function parse_ext(s)
  if s == '' then return false end
  local x = {}
  for k, v in string.gmatch(s, '([^;=]+)=([^;]*)') do x[k] = v end
  return x
end

-- TTL in ms for state that is back to "full" at `expires` (microseconds).
local function ttl_ms(expires, now)
  local ms = ceil((expires - now) / 1000)
  if ms < 1 then ms = 1 end
  return ms + PAD
end

-- A word-sized state, in one string key: the algorithm's id as one byte, then its
-- `expires` and up to three fields as little-endian IEEE doubles (struct.pack
-- WORD[alg]). Binary rather than text because parsing and formatting decimal strings
-- was a measurable part of each decision's Redis CPU; doubles also read back bit for bit.
-- The size and the first byte identify the algorithm: a state written by another
-- algorithm (or the sliding log's text state, whose first byte is an ASCII digit)
-- never unpacks as this one's.
-- (GCRA's entry is its previous layout, still read by refunds.lua: gcra.lua.)
local WORD = {[0] = '<Bddd', [2] = '<Bdddd', [3] = '<Bddd', [4] = '<Bdd'}
local WORD_SIZE = {[0] = 25, [2] = 33, [3] = 25, [4] = 17}

-- Returns true and the fields as numbers; false when the key is absent, written by
-- another algorithm, or back to full (expires <= now), exactly when the in-process
-- store treats a key as fresh.
local function load(c, now)
  local raw = redis.call('GET', c.key)
  if not raw or #raw ~= WORD_SIZE[c.alg] or string.byte(raw) ~= c.alg then return false end
  local _, e, x, y, z = struct.unpack(WORD[c.alg], raw)
  if not (e > now) then return false end
  return true, x, y, z
end

-- Writes a word-sized state computed by DECIDE (c.state, with c.expires inside) with
-- its TTL, in one command; or, when DECIDE found that only some bytes of the stored
-- state change (c.patch at offset c.patch_at, see fixed_window.lua), just those
-- (c.state is set too).
local function store_word(c, now)
  if c.patch and type(redis.pcall('SETRANGE', c.key, c.patch_at, c.patch)) == 'number' then
    return
  end
  -- (or SETRANGE was refused: an ACL user set up from an earlier version's line)
  redis.call('SET', c.key, c.state, 'PX', int(ttl_ms(c.expires, now)))
end
