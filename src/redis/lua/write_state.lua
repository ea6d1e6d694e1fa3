-- TTLs and writes of decided states, after prelude.lua (lean_fixed_window.lua creates
-- them in its slow path): every script but the lean one-check ones (single_tail.lua).

-- TTL in ms for state that is back to "full" at `expires` (microseconds), padded by
-- PAD (caller-time mode).
local function ttl_ms(expires, now)
  local ms = ceil((expires - now) / 1000)
  if ms < 1 then ms = 1 end
  return ms + PAD
end

-- Writes a decided state (word_state.lua's store_word, without a table): the bytes that
-- change (SETRANGE at patch_at) when a body set `patch`, else the state whole with its
-- TTL. A patch falls back to the SET when SETRANGE is refused (an ACL line of a
-- version that did not use it).
local function write(key, state, expires, patch, patch_at, now)
  if patch and type(redis.pcall('SETRANGE', key, patch_at, patch)) == 'number' then return end
  redis.call('SET', key, state, 'PX', ttl_ms(expires, now))
end
