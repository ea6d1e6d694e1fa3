-- For scripts without penalties.lua (the coalesced script, the one-check concurrency
-- script): redis_store.cc sends them no forced checks and no policy with block_for.
local function apply_block(c)
  error('sluice: this script has no blocks (policy with block_for on ' .. c.key .. ')')
end
