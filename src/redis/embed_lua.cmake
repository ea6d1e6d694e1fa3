# Generates a .cc holding the decide scripts, concatenated from src/redis/lua/*.lua,
# and their SHA1s (what EVALSHA needs). Run at build time:
#   cmake -DLUA_DIR=<src/redis/lua> -DOUT=<file.cc> -P embed_lua.cmake
#
# Every script starts with clock.lua (where `now` comes from). Each O(1) algorithm's
# decision is written once, as a body (fixed_window.lua, sliding_window_counter.lua,
# token_bucket.lua, gcra.lua) that reads and sets the locals single_head.lua lists;
# this file puts each body in both scripts that need it:
# - the batch script: prelude + the word states' codec (word_state.lua: what refunds,
#   penalties and the DECIDE wrappers' COMMIT read and write) + each body wrapped as
#   DECIDE[id] (the wrapper below sets the locals from the check `c` and hands the
#   outcome back in `c`) + the sliding log,
#   followed by its refund and force, + blocks (penalties.lua) + concurrency + the group
#   runner (any checks, all or nothing; refunds; penalties; permits);
# - one script per algorithm for a single check, indexed by sluice::Algorithm:
#   single_head + the body + single_tail for the O(1) algorithms (lean straight-line
#   code, no tables or closures), and prelude + sliding_window_log + penalties + dispatch for the
#   sliding log (the batch script with only the one algorithm it needs defined);
# - the coalesced script: the same group runner and wire layout as the batch script
#   (runner.lua), with only the parts a merged call uses (decisions: no refunds,
#   penalties, blocks or permits, so no DECIDE wrappers either), so that a call does not
#   define what it never runs.
# - the lean scripts of plain decisions (lean_fixed_window.lua, lean_bucket.lua,
#   lean_sliding_log.lua):
#   their own wire layout, no group runner; the sliding log's entries codec
#   (log_entries.lua) is shared by its batch, coalesced and one-check scripts and, created
#   only for a denial or a peek, the lean sliding-log script.
# The runner decides the O(1) algorithms' plain decisions inline (their bodies in an
# if-chain at its "--@INLINE@" line: no table or closure per check); the DECIDE[id]
# wrappers serve the batch script's penalties, blocks and refunds.
# A body's "--@NORMALISED@ <locals>" line names the locals that hold the state it
# decided on (after carry-over, before the cost): the DECIDE wrapper hands them back in
# c.n1.. so that a penalty normalises the state through the decision itself.
# A part named "decide:<file>:<id>" is <file>.lua's decision body wrapped as DECIDE[<id>],
# followed by the file's operations (REFUND, FORCE: what follows its "--@OPERATIONS@"
# line); a part named "all:<file>" is the whole file (the sliding log's decision and its
# operations); everywhere else an algorithm's file gives only its body.

# Reads <name>.lua into `out_var` with its snippets in place: a line that is only
# "--@<SNIPPET>@" (indented as the snippet's own text is) becomes <snippet>.lua. Snippets
# are code that several scripts share as text, so that it stays inline (no function
# created per call): the write-first step (gcra.lua, token_bucket.lua) and its undo
# (those and sliding_window_counter.lua); the lean scripts' arguments (their head, each
# group's now, each check's number); a decision's reply (the runner, the lean scripts).
function(read_part name out_var)
  file(READ "${LUA_DIR}/${name}.lua" content)
  foreach(snippet write_first put_back lean_head lean_group_now lean_check reply_put log_inline)
    string(TOUPPER "${snippet}" marker)
    file(READ "${LUA_DIR}/${snippet}.lua" text)
    string(REGEX MATCH "^ +" indent "${text}")  # (none: an empty match is no match)
    string(REPLACE "${indent}--@${marker}@\n" "${text}" content "${content}")
  endforeach()
  set(${out_var} "${content}" PARENT_SCOPE)
endfunction()

# Reads <name>.lua into `body_var` (up to a line that starts with "--@OPERATIONS@", if any) and
# `ops_var` (the rest; empty if none).
function(read_lua name body_var ops_var)
  read_part(${name} content)
  string(FIND "${content}" "\n--@OPERATIONS@" at)
  if(at EQUAL -1)
    set(${body_var} "${content}" PARENT_SCOPE)
    set(${ops_var} "" PARENT_SCOPE)
  else()
    math(EXPR at "${at} + 1")  # (the body keeps its last newline)
    string(SUBSTRING "${content}" 0 ${at} body)
    string(SUBSTRING "${content}" ${at} -1 ops)
    set(${body_var} "${body}" PARENT_SCOPE)
    set(${ops_var} "${ops}" PARENT_SCOPE)
  endif()
endfunction()

function(concat out_var)
  set(body "")
  foreach(part IN LISTS ARGN)
    if(part MATCHES "^decide:([a-z_]+):([0-9])$")
      set(id ${CMAKE_MATCH_2})
      read_lua(${CMAKE_MATCH_1} content ops)
      # The body's "--@NORMALISED@ <locals>" line (a comment in every other script)
      # hands the state it decided on to FORCE (word_state.lua, normalised).
      string(REGEX REPLACE "\n--@NORMALISED@ ([^\n]*)" "\n  c.n1, c.n2, c.n3 = \\1"
             content "${content}")
      string(APPEND body "DECIDE[${id}] = function(c, now)\n"
             "  local key, limit, w, cap, init, cost = c.key, c.limit, c.window, c.cap, c.init, c.cost\n"
             "  local need, mode, mw, solo, tried = max(cost, 1), c.mode, c.mw, false, false\n"
             "  local allowed, remaining, reset, retry, state, expires, start, start_expires, patch, patch_at, undo\n"
             "${content}"
             "  c.state, c.expires, c.start, c.start_expires = state, expires, start, start_expires\n"
             "  c.patch, c.patch_at, c.undo = patch, patch_at, undo\n"
             "  return allowed, remaining, reset, retry\n"
             "end\n"
             "COMMIT[${id}] = store_word\n"
             "${ops}")
    elseif(part MATCHES "^all:([a-z_]+)$")
      read_lua(${CMAKE_MATCH_1} content ops)
      string(APPEND body "${content}${ops}")
    elseif(part STREQUAL "runner")
      # The group runner decides the O(1) algorithms inline, each body in a branch of
      # its own (untaken branches cost a call nothing).
      set(chain "")
      set(word "if")
      foreach(alg fixed_window:0 sliding_window_counter:2 token_bucket:3 gcra:4)
        string(REGEX MATCH "^([a-z_]+):([0-9])$" _ "${alg}")
        read_lua(${CMAKE_MATCH_1} content ops)
        string(APPEND chain "${word} alg == ${CMAKE_MATCH_2} then\n${content}")
        set(word "elseif")
      endforeach()
      string(APPEND chain "else\n  return redis.error_reply('sluice: unknown algorithm ' .. alg)\nend\n")
      read_part(runner content)
      string(REPLACE "      --@INLINE@\n" "${chain}" content "${content}")
      string(APPEND body "${content}")
    elseif(part STREQUAL "lean_fixed_window")
      # The lean fixed-window script decides a key INCRBY cannot add to, and a peek,
      # with fixed_window.lua's body itself, wrapped as decide_body and created with
      # write_state.lua's helpers at its "--@DECIDE_BODY@" line, the first time a check
      # needs them.
      read_lua(fixed_window fw ops)
      read_lua(write_state ws ops)
      string(CONCAT fn "if not decide_body then\n${ws}store = write\n"
             "decide_body = function(key, limit, w, cost, now, tried)\n"
             "  local cap, init, need, mode, mw, solo = limit, -1, max(cost, 1), false, 0, false\n"
             "  local allowed, remaining, reset, retry, state, expires, start, start_expires, patch, patch_at, undo\n"
             "${fw}"
             "  return allowed, remaining, reset, retry, state, expires, patch, patch_at, undo\n"
             "end\nend\n")
      read_part(lean_fixed_window content)
      string(REPLACE "--@DECIDE_BODY@\n" "${fn}" content "${content}")
      string(APPEND body "${content}")
    elseif(part STREQUAL "lean_bucket")
      # The lean bucket script decides what its first SET does not with gcra.lua's,
      # token_bucket.lua's and sliding_window_counter.lua's bodies themselves, wrapped as
      # decide_body and created with write_state.lua's helpers and the bucket's refill at
      # its "--@DECIDE_BODY@" line, the first time a check needs them.
      read_lua(gcra gb ops)
      read_lua(token_bucket tb ops)
      read_lua(sliding_window_counter sc ops)
      read_lua(bucket_refill rf ops)
      read_lua(write_state ws ops)
      string(CONCAT fn "if not decide_body then\n${ws}${rf}store = write\n"
             "decide_body = function(alg, key, limit, w, cap, init, cost, now, solo, tried)\n"
             "  local need, mode, mw = max(cost, 1), false, 0\n"
             "  local allowed, remaining, reset, retry, state, expires, start, start_expires, patch, patch_at, undo\n"
             "  if alg == 4 then\n${gb}  elseif alg == 3 then\n${tb}  else\n${sc}  end\n"
             "  return allowed, remaining, reset, retry, state, expires, patch, patch_at\n"
             "end\nend\n")
      read_part(lean_bucket content)
      string(REPLACE "      --@DECIDE_BODY@\n" "${fn}" content "${content}")
      string(APPEND body "${content}")
    elseif(part STREQUAL "lean_sliding_log")
      # The lean sliding-log script creates log_entries.lua's functions (a denial's
      # search of the log) at its "--@LOG_ENTRIES@" line, the first time a check needs
      # them.
      read_lua(log_entries entries ops)
      read_part(lean_sliding_log content)
      string(REPLACE "        --@LOG_ENTRIES@\n" "${entries}" content "${content}")
      string(APPEND body "${content}")
    else()
      read_lua(${part} content ops)
      string(APPEND body "${content}")
    endif()
  endforeach()
  set(${out_var} "${body}" PARENT_SCOPE)
endfunction()

function(emit name)
  concat(body clock ${ARGN})
  string(SHA1 sha "${body}")
  set(text "const Script ${name} = {R\"sluice_lua(${body})sluice_lua\",\n    \"${sha}\"};\n")
  set(emitted "${emitted}${text}" PARENT_SCOPE)
endfunction()

set(emitted "")
# (concurrency: issue #12 item 1; its checks always carry ext, so only the batch script
# needs it.)
emit(kBatchScript prelude write_state word_state bucket_refill decide:fixed_window:0 log_entries all:sliding_window_log decide:sliding_window_counter:2
     decide:token_bucket:3 decide:gcra:4 penalties concurrency runner)
emit(kCoalescedScript prelude write_state bucket_refill log_entries sliding_window_log no_penalties runner)
emit(kSingleFixedWindow single_head fixed_window single_tail)
emit(kSingleSlidingWindowLog prelude write_state bucket_refill log_entries all:sliding_window_log penalties runner)
emit(kSingleSlidingWindowCounter single_head sliding_window_counter single_tail)
emit(kSingleTokenBucket single_head bucket_refill token_bucket single_tail)
emit(kSingleGcra single_head gcra single_tail)
# One concurrency check (an AcquirePermit of a concurrency policy alone, a release, an
# extend): the batch script with only that algorithm defined, like the sliding log's,
# so a call does not define every algorithm's functions (about 5 us of Redis CPU).
emit(kSingleConcurrency prelude write_state bucket_refill concurrency no_logs no_penalties runner)
# Plain fixed-window checks (issue #18): one call, a batch or coalesced callers, one
# INCRBY per decision (lean_fixed_window.lua).
emit(kLeanFixedWindow lean_fixed_window)
# Plain GCRA, token-bucket and sliding-counter checks (issue #18): a batch or coalesced
# callers, one SET ... GET per decision of a check alone in its group (lean_bucket.lua).
emit(kLeanBucket lean_bucket)
# Plain sliding-log checks (issue #18): one call, a batch or coalesced callers, on the
# sliding log's state without a table per check (lean_sliding_log.lua).
emit(kLeanSlidingLog lean_sliding_log)
set(cc "// Generated by src/redis/embed_lua.cmake from src/redis/lua/*.lua. Do not edit.\n")
string(APPEND cc "#include \"redis/scripts.h\"\n\nnamespace sluice::redis {\nnamespace {\n\n")
string(APPEND cc "${emitted}\n}  // namespace\n\n")
string(APPEND cc "const Script& BatchScript() { return kBatchScript; }\n\n")
string(APPEND cc "const Script& CoalescedScript() { return kCoalescedScript; }\n\n")
string(APPEND cc "const Script& LeanFixedWindowScript() { return kLeanFixedWindow; }\n\n")
string(APPEND cc "const Script& LeanSlidingLogScript() { return kLeanSlidingLog; }\n\n")
string(APPEND cc "const Script& LeanBucketScript() { return kLeanBucket; }\n\n")
string(APPEND cc "const Script& SingleCheckScript(Algorithm a) {\n  switch (a) {\n")
string(APPEND cc "    case Algorithm::kFixedWindow: return kSingleFixedWindow;\n")
string(APPEND cc "    case Algorithm::kSlidingWindowLog: return kSingleSlidingWindowLog;\n")
string(APPEND cc "    case Algorithm::kSlidingWindowCounter: return kSingleSlidingWindowCounter;\n")
string(APPEND cc "    case Algorithm::kTokenBucket: return kSingleTokenBucket;\n")
string(APPEND cc "    case Algorithm::kGcra: return kSingleGcra;\n    case Algorithm::kConcurrency: return kSingleConcurrency;\n  }\n  return kBatchScript;\n}\n\n")
string(APPEND cc "std::vector<std::string> AllScripts() {\n  return {std::string(kBatchScript.source)")
foreach(s kCoalescedScript kLeanFixedWindow kLeanSlidingLog kLeanBucket kSingleFixedWindow kSingleSlidingWindowLog kSingleSlidingWindowCounter kSingleTokenBucket kSingleGcra kSingleConcurrency)
  string(APPEND cc ",\n          std::string(${s}.source)")
endforeach()
string(APPEND cc "};\n}\n\n}  // namespace sluice::redis\n")
file(WRITE "${OUT}.tmp" "${cc}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
