# Fuzzing of the table parser.
# The plain driver: the seed corpus and deterministic mutations, with the
# normal compiler (and under the sanitizer build), in a few seconds.
add_executable(fuzz_tablefmt_driver ${CMAKE_CURRENT_LIST_DIR}/fuzz_tablefmt.c)
target_compile_definitions(fuzz_tablefmt_driver PRIVATE DETD_FUZZ_DRIVER=1)
target_link_libraries(fuzz_tablefmt_driver PRIVATE detd_tablefmt)
add_test(NAME fuzz_tablefmt
         COMMAND fuzz_tablefmt_driver
                 ${CMAKE_CURRENT_LIST_DIR}/corpus_tablefmt 3000)
set_tests_properties(fuzz_tablefmt PROPERTIES TIMEOUT 120)

# libFuzzer with clang, when clang and its runtime are there: built with
# its own compiler by a custom command (the project's compiler may be gcc)
# and run for about 20 s; new inputs go to a corpus in the build tree.
find_program(DETD_CLANG clang)
if(DETD_CLANG)
  set(_probe ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe.c)
  file(WRITE ${_probe} "#include <stdint.h>\n#include <stddef.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
       "{(void)d;(void)n;return 0;}\n")
  execute_process(COMMAND ${DETD_CLANG} -fsanitize=fuzzer,address,undefined
                          ${_probe} -o ${CMAKE_CURRENT_BINARY_DIR}/fuzz_probe
                  RESULT_VARIABLE _fuzz_rc OUTPUT_QUIET ERROR_QUIET)
  if(_fuzz_rc EQUAL 0)
    set(_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_tablefmt_libfuzzer)
    set(_src ${CMAKE_CURRENT_LIST_DIR}/fuzz_tablefmt.c
             ${CMAKE_SOURCE_DIR}/daemon/tablefmt.c
             ${CMAKE_SOURCE_DIR}/client/src/error.c)
    add_custom_command(
      OUTPUT ${_bin}
      COMMAND ${DETD_CLANG} -g -O1 -fsanitize=fuzzer,address,undefined
              -fno-sanitize-recover=undefined -std=c11
              -I${CMAKE_SOURCE_DIR}/daemon -I${CMAKE_SOURCE_DIR}/client/include
              ${JANSSON_CFLAGS} ${_src} ${JANSSON_LDFLAGS} -o ${_bin}
      DEPENDS ${_src} ${CMAKE_SOURCE_DIR}/daemon/tablefmt.h
      COMMENT "clang libFuzzer target fuzz_tablefmt_libfuzzer"
      VERBATIM)
    add_custom_target(fuzz_tablefmt_libfuzzer ALL DEPENDS ${_bin})
    add_test(NAME fuzz_tablefmt_libfuzzer
             COMMAND sh -c "mkdir -p \"$1\" && exec \"$2\" -max_total_time=20 -rss_limit_mb=2048 -timeout=10 \"$1\" \"$3\""
                     sh ${CMAKE_CURRENT_BINARY_DIR}/corpus_tablefmt ${_bin}
                     ${CMAKE_CURRENT_LIST_DIR}/corpus_tablefmt)
    set_tests_properties(fuzz_tablefmt_libfuzzer PROPERTIES TIMEOUT 120)
  else()
    message(STATUS "clang cannot build libFuzzer targets: "
                   "fuzz_tablefmt_libfuzzer is not built")
  endif()
endif()
