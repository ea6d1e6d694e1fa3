-- sluice: the start of every decide script (src/redis/embed_lua.cmake puts it first).
-- ARGV[1] is "" to decide on Redis's own clock (TIME, so app servers with skewed clocks
-- agree), or the caller's now in microseconds (caller-time mode, tests only).
-- Redis < 5 replicates scripts verbatim and refuses writes after TIME unless the
-- script asks for effects replication (the default, and a no-op, since Redis 5).
if redis.replicate_commands then redis.replicate_commands() end
local now
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  now = tonumber(ARGV[1])
end
