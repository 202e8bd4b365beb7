# detd_probe: raw gRPC calls for hostile-input tests.
add_executable(detd_probe ${CMAKE_CURRENT_LIST_DIR}/detd_probe.c)
target_link_libraries(detd_probe PRIVATE PkgConfig::GRPC)
