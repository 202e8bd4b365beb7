# Integration tests: real daemons driven by real clients.

# detd_loadgen: a libdetd client process (decide / time / report / observe,
# --hold for kill -9 tests, --bench for throughput and latency).
add_executable(detd_loadgen ${CMAKE_CURRENT_LIST_DIR}/detd_loadgen.c)
target_link_libraries(detd_loadgen PRIVATE detd detd_wire PkgConfig::JANSSON
                      Threads::Threads)

# Registration of the integration tests (ctest) goes here, e.g.
# (the pytest suites are registered in tests/CMakeLists.txt)
