# libdetd (shared), its internal gRPC adapter (static, shared with detctl)
# and detctl. Included by client/CMakeLists.txt.

# The gRPC adapter: protobuf-c <-> byte buffers, unary calls, streams.
add_library(detd_wire STATIC ${CMAKE_CURRENT_SOURCE_DIR}/src/wire.c)
target_include_directories(detd_wire PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(detd_wire PUBLIC detd_proto detd_common PkgConfig::GRPC
                      Threads::Threads)
target_compile_options(detd_wire PRIVATE -fvisibility=hidden)

# libdetd.so.0: only the detd_* API is exported (the version script also
# hides the protobuf-c code linked in from detd_proto).
add_library(detd SHARED ${CMAKE_CURRENT_SOURCE_DIR}/src/client.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/report.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/share.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/session.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/outage.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/autotune.c
                        ${CMAKE_CURRENT_SOURCE_DIR}/src/autotune_cuda.c)
target_include_directories(detd
  PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
# CUDA is opened at run time (autotune_cuda.c): no link-time dependency.
target_link_libraries(detd PRIVATE detd_wire detd_proto detd_common
                      PkgConfig::GRPC Threads::Threads ${CMAKE_DL_LIBS} m)
target_compile_options(detd PRIVATE -fvisibility=hidden)
target_link_options(detd PRIVATE
  -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/src/libdetd.map)
set_target_properties(detd PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION 0
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/libdetd.map)

# detctl: the operator's CLI (admin API, health).
add_executable(detctl ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_print.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_tables.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_table.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_merge.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_cli.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_call.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_key.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_verify.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_nondet.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_tuners.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_jobs.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_lock.c
                      ${CMAKE_CURRENT_SOURCE_DIR}/src/detctl_report.c)
target_link_libraries(detctl PRIVATE detd_wire detd_common detd_lockfmt
                                     PkgConfig::JANSSON)

configure_file(${CMAKE_CURRENT_SOURCE_DIR}/detd.pc.in
               ${CMAKE_CURRENT_BINARY_DIR}/detd.pc @ONLY)

install(TARGETS detd
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS detctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/detd/client.h
              ${CMAKE_CURRENT_SOURCE_DIR}/include/detd/error.h
              ${CMAKE_CURRENT_SOURCE_DIR}/include/detd/autotune.h
              ${CMAKE_CURRENT_SOURCE_DIR}/include/detd/autotune.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/detd)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/detd.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
