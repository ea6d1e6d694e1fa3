# Runs BIN with ARGS (a ;-list) and checks its exit status (EXPECT_RC) and, when given,
# that stdout matches EXPECT_OUT and stderr matches EXPECT_ERR (regular expressions).
execute_process(COMMAND ${BIN} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err TIMEOUT 120)
string(REPLACE "\n" " " out_flat "${out}")
if(NOT rc STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "exit status ${rc}, expected ${EXPECT_RC}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECT_OUT AND NOT out_flat MATCHES "${EXPECT_OUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_OUT}':\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECT_ERR AND NOT err MATCHES "${EXPECT_ERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_ERR}':\n${err}")
endif()
message(STATUS "ok: ${BIN} ${ARGS}\n${out}${err}")
