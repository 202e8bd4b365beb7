# detd_probe: raw gRPC calls for hostile-input tests.
add_executable(detd_probe ${CMAKE_CURRENT_LIST_DIR}/detd_probe.c)
target_link_libraries(detd_probe PRIVATE PkgConfig::GRPC)
# The same call as a library, made from inside the process that loads it.
add_library(detd_probe_lib SHARED ${CMAKE_CURRENT_LIST_DIR}/detd_probe.c)
target_compile_definitions(detd_probe_lib PRIVATE DETD_PROBE_LIB)
target_link_libraries(detd_probe_lib PRIVATE PkgConfig::GRPC)
set_target_properties(detd_probe_lib PROPERTIES OUTPUT_NAME detd_probe)
