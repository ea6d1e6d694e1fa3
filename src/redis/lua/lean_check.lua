    -- (lean_check.lua: the check's number, policy * 2 + last; none when uniform)
    local v = 1 -- (uniform: policy 0, last)
    if not uniform then
      v = tonumber(ARGV[a])
      a = a + 1
    end
    last = v % 2
