  -- (write_first.lua, at the "--@WRITE_FIRST@" line of gcra.lua and token_bucket.lua:
  -- `guess` written with its TTL `ms`, replying the state it replaced, unless the caller
  -- made that SET already: `tried`, lean_bucket.lua)
  raw = tried or redis.pcall('SET', key, guess, 'PX', ms, 'GET')
  if type(raw) == 'table' then -- refused (Redis before 6.2): nothing was written
    guess = false
    raw = redis.call('GET', key)
  end
