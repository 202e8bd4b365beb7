# Fuzzing of the decoders of untrusted bytes: the table parser (files), the
# check of received strings (wirecheck: request bytes from the socket) and
# the etcd backend's decision decoder (values read from etcd). Requests on
# the socket are fuzzed over the wire by tests/integration/test_fuzz_requests.py.
#
# Each target gets
#  - a plain driver (driver.c: the seed corpus and deterministic mutations)
#    built with the project's compiler, so it also runs in the sanitizer
#    build: ctest fuzz_<name>, a few seconds;
#  - with clang and its libFuzzer runtime, a libFuzzer binary built by a
#    custom command with clang (the project's compiler may be gcc), run for
#    about 20 s: ctest fuzz_<name>_libfuzzer; new inputs go to a corpus in
#    the build tree.
find_program(DETD_CLANG clang)
set(DETD_LIBFUZZER OFF)
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
    set(DETD_LIBFUZZER ON)
  else()
    message(STATUS "clang cannot build libFuzzer targets: only the plain "
                   "fuzz drivers are built")
  endif()
endif()

# detd_fuzz_target(NAME name [SOURCES files...] LIBS targets...
#                  CLANG_SOURCES files... CLANG_FLAGS flags...)
# SOURCES: code of the target not in a library (driver build only).
function(detd_fuzz_target)
  cmake_parse_arguments(F "" "NAME" "SOURCES;LIBS;CLANG_SOURCES;CLANG_FLAGS"
                        ${ARGN})
  set(_target ${CMAKE_CURRENT_LIST_DIR}/fuzz_${F_NAME}.c)
  set(_corpus ${CMAKE_CURRENT_LIST_DIR}/corpus_${F_NAME})
  add_executable(fuzz_${F_NAME}_driver ${_target} ${F_SOURCES}
                 ${CMAKE_CURRENT_LIST_DIR}/driver.c)
  target_include_directories(fuzz_${F_NAME}_driver PRIVATE
                             ${CMAKE_SOURCE_DIR}/daemon)
  target_link_libraries(fuzz_${F_NAME}_driver PRIVATE ${F_LIBS})
  add_test(NAME fuzz_${F_NAME} COMMAND fuzz_${F_NAME}_driver ${_corpus} 3000)
  set_tests_properties(fuzz_${F_NAME} PROPERTIES TIMEOUT 120)
  if(NOT DETD_LIBFUZZER)
    return()
  endif()
  set(_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${F_NAME}_libfuzzer)
  set(_src ${_target} ${F_CLANG_SOURCES}
           ${CMAKE_SOURCE_DIR}/common/error.c)
  add_custom_command(
    OUTPUT ${_bin}
    COMMAND ${DETD_CLANG} -g -O1 -fsanitize=fuzzer,address,undefined
            -fno-sanitize-recover=undefined -std=c11
            -I${CMAKE_SOURCE_DIR}/common -I${CMAKE_SOURCE_DIR}/daemon -I${CMAKE_SOURCE_DIR}/client/include
            ${F_CLANG_FLAGS} ${_src} -o ${_bin}
    DEPENDS ${_src}
    COMMENT "clang libFuzzer target fuzz_${F_NAME}_libfuzzer"
    VERBATIM)
  add_custom_target(fuzz_${F_NAME}_libfuzzer ALL DEPENDS ${_bin})
  add_test(NAME fuzz_${F_NAME}_libfuzzer
           COMMAND sh -c "mkdir -p \"$1\" && exec \"$2\" -max_total_time=20 -rss_limit_mb=2048 -timeout=10 \"$1\" \"$3\""
                   sh ${CMAKE_CURRENT_BINARY_DIR}/corpus_${F_NAME} ${_bin}
                   ${_corpus})
  set_tests_properties(fuzz_${F_NAME}_libfuzzer PROPERTIES TIMEOUT 120)
endfunction()

detd_fuzz_target(NAME tablefmt LIBS detd_common
                 CLANG_SOURCES ${CMAKE_SOURCE_DIR}/common/tablefmt.c
                 CLANG_FLAGS ${JANSSON_CFLAGS} ${JANSSON_LDFLAGS})

detd_fuzz_target(NAME decision
                 SOURCES ${CMAKE_SOURCE_DIR}/daemon/cluster/cluster_codec.c
                 LIBS detd_data PkgConfig::LIBUV
                 CLANG_SOURCES ${CMAKE_SOURCE_DIR}/daemon/cluster/cluster_codec.c
                               ${CMAKE_SOURCE_DIR}/daemon/core/keyid.c
                               ${CMAKE_SOURCE_DIR}/daemon/core/decision.c
                               ${CMAKE_SOURCE_DIR}/daemon/data/store.c
                               ${CMAKE_SOURCE_DIR}/daemon/data/store_sql.c
                               ${CMAKE_SOURCE_DIR}/daemon/data/store_vote.c
                               ${CMAKE_SOURCE_DIR}/daemon/data/store_import.c
                               ${CMAKE_SOURCE_DIR}/daemon/data/store_obs.c
                 CLANG_FLAGS ${JANSSON_CFLAGS} ${LIBUV_CFLAGS} ${SQLITE_CFLAGS}
                             ${JANSSON_LDFLAGS} ${SQLITE_LDFLAGS} ${LIBCRYPTO_LDFLAGS})

detd_fuzz_target(NAME wirecheck LIBS detd_core detd_proto
                 CLANG_SOURCES ${CMAKE_SOURCE_DIR}/daemon/core/wirecheck.c
                               ${CMAKE_SOURCE_DIR}/common/utf8.c
                               ${PROTO_SRCS}
                 CLANG_FLAGS -I${PROTO_OUT} ${PROTOBUFC_LDFLAGS})
if(TARGET fuzz_wirecheck_libfuzzer)
  add_dependencies(fuzz_wirecheck_libfuzzer detd_proto) # generated sources
endif()
