# The unix socket's access policy (ids and the check; no sockets).
add_library(detd_access STATIC access.c)
# The Prometheus text format (pure).
add_library(detd_metrics STATIC metrics.c)
target_include_directories(detd_metrics PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(detd_metrics PUBLIC detd_error m)
target_include_directories(detd_access PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(detd_access PUBLIC detd_error)

# The detd executable: loop, rpc adapter, service, GPU probe.
# Settings: the option table, argv, the configuration file, and the log
# lines (no foreign API: unit-tested alone).
add_library(detd_options STATIC options.c conffile.c log.c strfmt.c)
target_include_directories(detd_options PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
                           ${CMAKE_SOURCE_DIR}/client/include)
target_link_libraries(detd_options PUBLIC detd_access detd_error detd_proto PkgConfig::LIBUV)

add_executable(detd_daemon main.c loop.c service.c admin.c votes.c imports.c convert.c hotcache.c rpc.c gpu.c
               cluster.c cluster_codec.c coord.c sdnotify.c listener.c exporter.c
               metrics_http.c tableadmin.c)
target_link_libraries(detd_daemon PRIVATE detd_options detd_access detd_metrics detd_store detd_pure
                      detd_proto detd_error detd_etcd detd_tables
                      PkgConfig::GRPC PkgConfig::LIBUV PkgConfig::JANSSON
                      PkgConfig::SYSTEMD PkgConfig::MHD
                      Threads::Threads ${CMAKE_DL_LIBS} m)
target_include_directories(detd_daemon PRIVATE ${CMAKE_SOURCE_DIR}/client/include)
if(CUDA_DRIVER_INCLUDE)
  target_compile_definitions(detd_daemon PRIVATE DETD_HAVE_CUDA_H=1)
  target_include_directories(detd_daemon SYSTEM PRIVATE ${CUDA_DRIVER_INCLUDE})
endif()
# The library target is called detd (libdetd.so): the executable target is
# detd_daemon and its file is named detd.
set_target_properties(detd_daemon PROPERTIES OUTPUT_NAME detd)
# The packaged tables: searched after every --tables directory.
set(DETD_TABLES_DIR "${CMAKE_INSTALL_FULL_DATADIR}/detd/tables" CACHE PATH
    "Directory of the tables installed with detd (searched last)")
target_compile_definitions(detd_daemon PRIVATE
                           DETD_TABLES_DIR="${DETD_TABLES_DIR}")
file(GLOB DETD_PACKAGED_TABLES ${CMAKE_SOURCE_DIR}/tables/*.json)
install(FILES ${DETD_PACKAGED_TABLES}
        DESTINATION ${DETD_TABLES_DIR})
install(TARGETS detd_daemon RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# systemd integration and the example configuration. The unit runs
# /usr/bin/detd --config /etc/detd/detd.conf (install with --prefix /usr).
set(DETD_SYSTEMD_UNITDIR "${CMAKE_INSTALL_PREFIX}/lib/systemd/system"
    CACHE PATH "Where detd.service is installed")
set(DETD_SYSUSERSDIR "${CMAKE_INSTALL_PREFIX}/lib/sysusers.d"
    CACHE PATH "Where the sysusers.d file for the detd user is installed")
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/detd.service
              ${CMAKE_SOURCE_DIR}/deploy/systemd/detd.socket
        DESTINATION ${DETD_SYSTEMD_UNITDIR})
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/detd.sysusers
        DESTINATION ${DETD_SYSUSERSDIR} RENAME detd.conf)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/detd.conf
        DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/detd)
