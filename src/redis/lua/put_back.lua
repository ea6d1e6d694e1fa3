  -- (put_back.lua, at the "--@PUT_BACK@" line of gcra.lua, token_bucket.lua and
  -- sliding_window_counter.lua: a denied guess gives back what it overwrote, `raw`, a
  -- live state with its expiry `old_e`)
  if old_e then
    redis.call('SET', key, raw, 'PX', ceil((old_e - now) / 1000) + PAD)
  elseif raw then
    redis.call('SET', key, raw, 'KEEPTTL')
  else
    redis.call('DEL', key)
  end
