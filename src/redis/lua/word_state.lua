-- sluice: the word-sized states of the O(1) algorithms as a refund, a penalty or a
-- DECIDE wrapper's COMMIT reads and writes them (the batch script only: the inline
-- decisions of the group runner and the one-check scripts read their layouts in their
-- own bodies, so the coalesced script and the one-check sliding log and concurrency
-- scripts do not define any of this on every call). After prelude.lua.

-- floor(t / unit) * unit, exact for integers below 2^53 (t may be negative).
local function floor_to(t, unit)
  local r = math.fmod(t, unit)
  if r < 0 then r = r + unit end
  return t - r
end

-- A fixed window's counter (fixed_window.lua): the count stored in `n` (a plain integer
-- >= 2^52) when it is the count of the window at ws (of length w) or of a later one
-- (the clock went back), with that window's start; nil otherwise (an earlier window).
local function counter_count(n, ws, w)
  local tag = 1048576 + (ws / w) % 1048576
  local otag = floor(n / 4294967296)
  local d = (otag - tag) % 1048576
  if otag < 1048576 or otag >= 2097152 or d >= 524288 then return nil end
  return n - otag * 4294967296, ws + d * w
end

-- The counter of the window at ws with `count` in it.
local function counter_value(ws, w, count)
  return (1048576 + (ws / w) % 1048576) * 4294967296 + count
end

-- A word-sized state, in one string key: the algorithm's id as one byte, then its
-- `expires` and up to three fields as little-endian IEEE doubles (struct.pack
-- WORD[alg]). Binary rather than text because parsing and formatting decimal strings
-- was a measurable part of each decision's Redis CPU; doubles also read back bit for bit.
-- The size and the first byte identify the algorithm: a state written by another
-- algorithm (or the sliding log's text state, whose first byte is an ASCII digit)
-- never unpacks as this one's.
-- (GCRA's entry is its previous layout, still read by its refund: gcra.lua.)
local WORD = {[0] = '<Bddd', [2] = '<Bdddd', [3] = '<Bddd', [4] = '<Bdd'}
local WORD_SIZE = {[0] = 25, [2] = 33, [3] = 25, [4] = 17}

-- Carry-over (Policy::on_change): the same fields, then the limit, window and capacity
-- the state was written under (<algorithm>.lua). load() reads such a state only when
-- they are c's own (a refund to a state written under others gives nothing back) and
-- sets c.carry, so that pack_word() writes the same layout back.
local CARRY = {[0] = '<Bdddddd', [2] = '<Bddddddd', [3] = '<Bdddddd', [4] = '<Bddddd'}
local CARRY_SIZE = {[0] = 49, [2] = 57, [3] = 49, [4] = 41}

-- Returns true and the fields as numbers; false when the key is absent, written by
-- another algorithm, or back to full (expires <= now), exactly when the in-process
-- store treats a key as fresh.
local function load(c, now, raw)
  if raw == nil then raw = redis.call('GET', c.key) end
  if not raw or string.byte(raw) ~= c.alg then return false end
  if #raw == WORD_SIZE[c.alg] then
    local _, e, x, y, z = struct.unpack(WORD[c.alg], raw)
    if not (e > now) then return false end
    c.carry = false
    return true, x, y, z
  end
  if #raw ~= CARRY_SIZE[c.alg] then return false end
  local v = {struct.unpack(CARRY[c.alg], raw)}
  local n = #v -- the fields, then unpack's next position
  if not (v[2] > now) or v[n - 3] ~= c.limit or v[n - 2] ~= c.window or v[n - 1] ~= c.cap then
    return false
  end
  c.carry = true
  return true, v[3], v[4], v[5]
end

-- The word state of c with `expires` and the given fields, in the layout load() found.
local function pack_word(c, ...)
  if not c.carry then return struct.pack(WORD[c.alg], c.alg, c.expires, ...) end
  local v = {c.alg, c.expires, ...}
  v[#v + 1] = c.limit
  v[#v + 1] = c.window
  v[#v + 1] = c.cap
  return struct.pack(CARRY[c.alg], unpack(v))
end

-- Writes a word-sized state computed by DECIDE (c.state, with c.expires inside) with
-- its TTL, in one command; or, when DECIDE found that only some bytes of the stored
-- state change (c.patch at offset c.patch_at, see fixed_window.lua), just those
-- (c.state is set too).
local function store_word(c, now)
  if not c.state then return end -- (a fixed window's INCRBY wrote it already)
  if c.patch and type(redis.pcall('SETRANGE', c.key, c.patch_at, c.patch)) == 'number' then
    return
  end
  -- (or SETRANGE was refused: an ACL user set up from an earlier version's line)
  redis.call('SET', c.key, c.state, 'PX', int(ttl_ms(c.expires, now)))
end

-- The state of check c as a decision reads it (after carry-over, Policy::on_change), by
-- DECIDE itself at cost 0: the locals its body's "--@NORMALISED@" line names
-- (embed_lua.cmake). A cost-0 decision only reads (one GET). FORCE builds on it.
local function normalised(c, now)
  local cost = c.cost
  c.cost = 0
  DECIDE[c.alg](c, now)
  c.cost = cost
  return c.n1, c.n2, c.n3
end
