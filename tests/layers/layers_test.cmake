# Run by ctest (tests/layers/CMakeLists.txt):
#   cmake -DCOMPILE_COMMANDS=<build>/compile_commands.json -DCXX=<c++> -DWORK_DIR=<dir>
#         -P layers_test.cmake
# For each layer target, takes the include flags of one of its compile commands and runs
# the preprocessor on probes: every source folder and public header must be reachable
# exactly when the layer may use it, and including the first forbidden header must fail
# with "not found" naming that header.

cmake_minimum_required(VERSION 3.25)

# A header of each source folder under src/, and the public headers.
set(folder_header
  core=core/algorithms.h
  store=store/forwarding_store.h
  memory=memory/memory_store_internal.h
  decide=decide/decider.h
  limiter=limiter/limiter_internal.h
  redis=redis/url.h
  http=http/internal.h
  service=service/engine.h
  cli=cli/flags.h)
set(public_headers clock decision key permit_id policy status store memory_store limiter_stats
  limiter permit redis_store http)

# What each layer may use (docs/architecture.md, "The layers"): per target, one of its
# sources, the source folders and the public headers it may reach.
set(core_pub clock decision key permit_id policy status)
set(limiter_pub ${core_pub} store memory_store limiter_stats limiter permit)
set(layers sluice_core_algorithms sluice_store sluice_memory sluice_decide sluice_limiter
  sluice_redis sluice_http sluiced_lib sluice_cli_lib)
set(sluice_core_algorithms_source src/core/clock.cc)
set(sluice_core_algorithms_folders core)
set(sluice_core_algorithms_headers ${core_pub})
set(sluice_store_source src/store/store.cc)
set(sluice_store_folders core store)
set(sluice_store_headers ${core_pub} store)
set(sluice_memory_source src/memory/table.cc)
set(sluice_memory_folders core store memory)
set(sluice_memory_headers ${core_pub} store memory_store)
set(sluice_decide_source src/decide/lease.cc)
set(sluice_decide_folders core store memory decide)
set(sluice_decide_headers ${core_pub} store memory_store limiter_stats)
set(sluice_limiter_source src/limiter/permit.cc)
set(sluice_limiter_folders core store memory decide limiter)
set(sluice_limiter_headers ${limiter_pub})
set(sluice_redis_source src/redis/url.cc)
set(sluice_redis_folders core store memory redis)
set(sluice_redis_headers ${core_pub} store memory_store redis_store)
set(sluice_http_source src/http/headers.cc)
set(sluice_http_folders core store memory decide limiter http)
set(sluice_http_headers ${limiter_pub} http)
set(sluiced_lib_source src/service/log.cc)
set(sluiced_lib_folders core store memory decide limiter redis http service)
set(sluiced_lib_headers ${limiter_pub} redis_store http)
set(sluice_cli_lib_source src/cli/svg.cc)
set(sluice_cli_lib_folders core store memory decide limiter redis cli)
set(sluice_cli_lib_headers ${limiter_pub} redis_store http)

file(READ "${COMPILE_COMMANDS}" db)
string(JSON count LENGTH "${db}")
math(EXPR last "${count} - 1")

# The include flags of the compile command of SOURCE (or of the unity source holding it)
# in TARGET (its object file lies under CMakeFiles/<target>.dir/), into OUT.
function(include_flags target source out)
  foreach(i RANGE ${last})
    string(JSON cmd GET "${db}" ${i} command)
    string(JSON file GET "${db}" ${i} file)
    # A unity build compiles the target's sources from unity_<n>_cxx.cxx.
    if(NOT cmd MATCHES "CMakeFiles/${target}\\.dir/" OR
       NOT (file MATCHES "/${source}$" OR file MATCHES "/unity_[0-9]+_cxx\\.cxx$"))
      continue()
    endif()
    separate_arguments(args UNIX_COMMAND "${cmd}")
    set(flags)
    set(take_next OFF)
    foreach(a IN LISTS args)
      if(take_next)
        list(APPEND flags "${a}")
        set(take_next OFF)
      elseif(a MATCHES "^-(I|D|std=|iquote)")
        list(APPEND flags "${a}")
      elseif(a MATCHES "^-(isystem|iquote|include)$")
        list(APPEND flags "${a}")
        set(take_next ON)
      endif()
    endforeach()
    set(${out} "${flags}" PARENT_SCOPE)
    return()
  endforeach()
  message(SEND_ERROR "${target}: no compile command for ${source} in ${COMPILE_COMMANDS}")
  set(${out} "" PARENT_SCOPE)
endfunction()

set(failures 0)
foreach(target IN LISTS layers)
  set(source ${${target}_source})
  set(folders ${${target}_folders})
  set(headers ${${target}_headers})
  include_flags(${target} ${source} flags)
  if(NOT flags)
    math(EXPR failures "${failures} + 1")
    continue()
  endif()

  # One probe: a reachable forbidden header or an unreachable allowed one is an #error.
  set(probe "")
  set(first_forbidden "")
  foreach(pair IN LISTS folder_header)
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 folder)
    list(GET pair 1 header)
    if(folder IN_LIST folders)
      string(APPEND probe "#if !__has_include(\"${header}\")\n#error \"may use ${header}, not reachable\"\n#endif\n")
    else()
      string(APPEND probe "#if __has_include(\"${header}\")\n#error \"upward ${header} is reachable\"\n#endif\n")
      if(NOT first_forbidden)
        set(first_forbidden ${header})
      endif()
    endif()
  endforeach()
  foreach(h IN LISTS public_headers)
    if(h IN_LIST headers)
      string(APPEND probe "#if !__has_include(\"sluice/${h}.h\")\n#error \"may use sluice/${h}.h, not reachable\"\n#endif\n")
    else()
      string(APPEND probe "#if __has_include(\"sluice/${h}.h\")\n#error \"upward sluice/${h}.h is reachable\"\n#endif\n")
    endif()
  endforeach()
  file(WRITE ${WORK_DIR}/${target}_probe.cc "${probe}")
  execute_process(COMMAND ${CXX} ${flags} -E -o /dev/null ${WORK_DIR}/${target}_probe.cc
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message("FAIL ${target}: the include roots of ${source} do not match its layer:\n${err}")
    math(EXPR failures "${failures} + 1")
  endif()

  # An upward #include does not compile, and the compiler says which header it missed.
  if(first_forbidden)
    file(WRITE ${WORK_DIR}/${target}_upward.cc "#include \"${first_forbidden}\"\n")
    execute_process(COMMAND ${CXX} ${flags} -fsyntax-only ${WORK_DIR}/${target}_upward.cc
      RESULT_VARIABLE rc ERROR_VARIABLE err)
    string(REPLACE "." "\\." pattern "${first_forbidden}")
    if(rc EQUAL 0 OR NOT err MATCHES "${pattern}('? file not found|: No such file)")
      message("FAIL ${target}: #include \"${first_forbidden}\" should not compile:\n${err}")
      math(EXPR failures "${failures} + 1")
    else()
      message("ok ${target}: #include \"${first_forbidden}\" does not compile")
    endif()
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "${failures} layer check(s) failed")
endif()
