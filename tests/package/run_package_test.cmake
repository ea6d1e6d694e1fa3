# Installs the build tree into a temporary prefix, then configures, builds and runs
# the consumer project against it with only CMAKE_PREFIX_PATH pointing there.
#
#   cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DGENERATOR=...
#         -DCXX_COMPILER=... [-DCXX_FLAGS=... -DLINKER_FLAGS=...] -P run_package_test.cmake
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_package_test.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${step} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(f include/sluice/limiter.h)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "package test: ${f} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE config_files "${prefix}/*/sluiceConfig.cmake")
if(NOT config_files)
  message(FATAL_ERROR "package test: no sluiceConfig.cmake under ${prefix}")
endif()

run("configure consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${consumer_build}"
  -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
run("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run("run consumer" "${consumer_build}/sluice_consumer")
if(NOT last_output MATCHES "sluice consumer ok")
  message(FATAL_ERROR "package test: unexpected consumer output: ${last_output}")
endif()
message(STATUS "package test: ${last_output}")
