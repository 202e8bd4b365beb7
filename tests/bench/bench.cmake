# detd_bench: the load generator of tests/bench/bench_decide.py.
add_executable(detd_bench ${CMAKE_CURRENT_LIST_DIR}/detd_bench.c)
target_link_libraries(detd_bench PRIVATE detd detd_proto PkgConfig::GRPC Threads::Threads)
