  -- (lean_group_now.lua: the group's now, its first argument in caller-time mode)
  local gnow = now
  if caller_time then
    gnow = tonumber(ARGV[a])
    a = a + 1
  end
