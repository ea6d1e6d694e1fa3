      -- (reply_put.lua: one decision's reply, lua/runner.lua's encoding: ONE integer when
      -- allowed and it packs below 2^53, else its four numbers; `cap` sizes the packing)
      if allowed and retry == 0 and remaining >= 0 and remaining <= cap and reset >= 0 and
          (reset * (cap + 1) + remaining) * 2 + 1 < 9007199254740992 then
        n = n + 1
        out[n] = (reset * (cap + 1) + remaining) * 2 + 1
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed and 2 or 0, remaining, reset, retry
        n = n + 4
      end
