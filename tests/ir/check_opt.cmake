# Runs a stepjit tool as a user would and checks its output and exit status
# (stepjit-opt; MODE=fails also serves stepjit-bench and fashion_mnist,
# tests/CMakeLists.txt).
#   -DOPT=<stepjit-opt> -DMODE=roundtrip -DINPUT=<file.ir> -DWORK=<scratch dir>
#     the file (minus its first-line comment) must come back unchanged on
#     stdout, from the `print` pass on stderr, and again from stdin to -o.
#   -DMODE=fails -DARGS=<;-list> -DEXPECT_RC=<n> -DEXPECT=<regex>
#     stepjit-opt must exit with EXPECT_RC and print EXPECT on stderr.
# Runs in the directory of the .ir files so that diagnostics name them simply.
if(MODE STREQUAL "roundtrip")
  file(READ "${INPUT}" content)
  string(REGEX REPLACE "^//[^\n]*\n" "" expected "${content}")
  execute_process(COMMAND "${OPT}" "${INPUT}" --passes=verify,print
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out STREQUAL expected OR NOT err STREQUAL expected)
    message(FATAL_ERROR "round trip of ${INPUT} failed (exit ${rc})\n"
                        "stdout:\n${out}\nstderr:\n${err}")
  endif()
  file(WRITE "${WORK}/roundtrip.stdin.ir" "${out}")
  execute_process(COMMAND "${OPT}" - -o "${WORK}/roundtrip.out.ir"
                  INPUT_FILE "${WORK}/roundtrip.stdin.ir" RESULT_VARIABLE rc)
  file(READ "${WORK}/roundtrip.out.ir" again)
  if(NOT rc EQUAL 0 OR NOT again STREQUAL expected)
    message(FATAL_ERROR "stdin to -o round trip failed (exit ${rc}):\n${again}")
  endif()
elseif(MODE STREQUAL "fails")
  execute_process(COMMAND "${OPT}" ${ARGS}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL EXPECT_RC OR NOT err MATCHES "${EXPECT}")
    message(FATAL_ERROR "expected exit ${EXPECT_RC} and stderr matching "
                        "'${EXPECT}'; got exit ${rc}, stderr:\n${err}")
  endif()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
