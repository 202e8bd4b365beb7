# The detd executable: loop, rpc adapter, service, GPU probe.
add_executable(detd_daemon main.c loop.c service.c admin.c votes.c convert.c hotcache.c rpc.c gpu.c log.c
               cluster.c cluster_codec.c coord.c)
target_link_libraries(detd_daemon PRIVATE detd_store detd_pure detd_proto detd_error
                      detd_etcd
                      PkgConfig::GRPC PkgConfig::LIBUV PkgConfig::JANSSON
                      Threads::Threads ${CMAKE_DL_LIBS} m)
target_include_directories(detd_daemon PRIVATE ${CMAKE_SOURCE_DIR}/client/include)
if(CUDA_DRIVER_INCLUDE)
  target_compile_definitions(detd_daemon PRIVATE DETD_HAVE_CUDA_H=1)
  target_include_directories(detd_daemon SYSTEM PRIVATE ${CUDA_DRIVER_INCLUDE})
endif()
# The library target is called detd (libdetd.so): the executable target is
# detd_daemon and its file is named detd.
set_target_properties(detd_daemon PROPERTIES OUTPUT_NAME detd)
install(TARGETS detd_daemon RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
