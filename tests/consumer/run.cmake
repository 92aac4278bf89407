# ctest consumer.installed_package: installs the build into WORK/prefix, then
# builds tests/consumer against it twice, with find_package(stepjit) and with
# pkg-config, and runs each (they train a tiny model eagerly and compiled).
#   cmake -DBUILD_DIR=... -DSOURCE=... -DWORK=... -DGENERATOR=... -P run.cmake
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/stepjit/frontend/stepjit.h include/stepjit/ir/ops.def
          bin/stepjit-opt bin/stepjit-bench)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the installation lacks ${f}")
  endif()
endforeach()

run("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/cmake -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK}/cmake)
run("train_tiny (find_package)" ${WORK}/cmake/train_tiny)
message(STATUS "${last_output}")

find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs stepjit RESULT_VARIABLE rc
                OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs stepjit failed:\n${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run("build the consumer with pkg-config" c++ -std=c++20 -O1 ${SOURCE}/train_tiny.cc
    -o ${WORK}/train_tiny_pc ${flags})
run("train_tiny (pkg-config)" ${WORK}/train_tiny_pc)
