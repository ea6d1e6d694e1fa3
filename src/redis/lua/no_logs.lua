-- For one-check scripts without the sliding log (single concurrency): runner.lua
-- flushes the logs it touched; there are none.
local function flush_logs() end
