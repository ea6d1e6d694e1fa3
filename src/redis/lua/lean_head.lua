-- (lean_head.lua, at the "--@LEAN_HEAD@" line of each lean script: ARGV[1], the clock
-- mode, and ARGV[2], the call's policy count, as the wire layout above says)
local caller_time = ARGV[1] ~= ''
local PAD = 0
if caller_time then PAD = 3600000 end
local np = tonumber(ARGV[2])
local uniform = np == 0 -- (one policy, every check alone in its group)
if uniform then np = 1 end
