-- A token bucket's refill, the one place it is written (token_bucket.lua's decision and
-- carry-over, refund and force; src/core/token_bucket.cc): the tokens at
-- t = max(now, last), refilled at `rate` per us since `last` and capped at `cap`.
local function refill(tokens, last, now, cap, rate)
  local t = max(now, last)
  return min(cap, tokens + (t - last) * rate), t
end
