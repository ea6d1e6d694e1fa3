    -- (lean_check.lua: the check's number, policy * 2 + last, none when uniform; and
    -- whether the check is alone in its group)
    local v = 1 -- (uniform: policy 0, last)
    if not uniform then
      v = tonumber(ARGV[a])
      a = a + 1
    end
    last = v % 2
    local solo = first and last == 1
    first = false
