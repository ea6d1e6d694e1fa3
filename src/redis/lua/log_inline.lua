-- The most entries an inline sliding log holds (sliding_window_log.lua, "the inline
-- form"; a longer log is a sorted set). Shared by the batch scripts and the lean one.
local INLINE = 8
