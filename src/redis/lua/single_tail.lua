-- The end of every one-check script of an O(1) algorithm: write what the algorithm's
-- body decided (its new state when allowed with a cost, or a token bucket's started
-- state), then reply as dispatch.lua does for one check.
if state then
  store(state, expires)
elseif start then
  store(start, start_expires)
end
return {allowed and 1 or 0, remaining, reset, retry}
