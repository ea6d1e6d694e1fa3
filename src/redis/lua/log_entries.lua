-- The sliding window log's entries (the ZSET members sliding_window_log.lua describes):
-- their codec and the search for the time a denial waits for. Shared by the batch
-- scripts (before sliding_window_log.lua) and the lean sliding-log script, which
-- creates them only when a check needs them (embed_lua.cmake). Needs floor and int.
local function entry_cost(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

-- The running sum in a member of the current layout, or nil for an older member.
local function entry_cum(member)
  if string.byte(member, 1) < 63 or string.byte(member, 9) ~= 58 then return nil end
  return (struct.unpack('>d', member))
end

local function member(cum, cost)
  return struct.pack('>d', cum) .. ':' .. int(cost)
end

-- The time of the oldest entry at which the entries up to it sum to `excess` or more
-- (excess <= the log's total, so there is one).
local function time_freeing(c, excess)
  local first = redis.call('ZRANGE', c.key2, 0, 0)
  local last = redis.call('ZRANGE', c.key2, -1, -1)
  -- (a cost above the limit, an overage's usage report: nothing frees enough)
  if #first == 0 then return nil end
  local c0, cl = entry_cum(first[1]), entry_cum(last[1])
  if c0 and cl then
    local base = c0 - entry_cost(first[1])
    if cl - base < excess then return nil end
    local lo, hi = 0, redis.call('ZCARD', c.key2) - 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      local e = redis.call('ZRANGE', c.key2, int(mid), int(mid))
      if entry_cum(e[1]) - base >= excess then hi = mid else lo = mid + 1 end
    end
    return tonumber(redis.call('ZRANGE', c.key2, int(lo), int(lo), 'WITHSCORES')[2])
  end
  -- an older layout: walk from the oldest entry
  local freed, offset = 0, 0
  while true do
    local e = redis.call('ZRANGE', c.key2, int(offset), int(offset + 63), 'WITHSCORES')
    if #e == 0 then return nil end
    for j = 1, #e, 2 do
      freed = freed + entry_cost(e[j])
      if freed >= excess then return tonumber(e[j + 1]) end
    end
    offset = offset + 64
  end
end
