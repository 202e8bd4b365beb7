# The etcd adapter: the only code that touches etcd's protobufs.
# Generated protobuf-c code goes to the build tree (proto/etcd/).
set(ETCD_PROTO_DIR ${CMAKE_SOURCE_DIR}/proto)
set(ETCD_PROTO_OUT ${CMAKE_BINARY_DIR}/proto)
file(MAKE_DIRECTORY ${ETCD_PROTO_OUT}/etcd)
add_custom_command(
  OUTPUT ${ETCD_PROTO_OUT}/etcd/kv.pb-c.c ${ETCD_PROTO_OUT}/etcd/kv.pb-c.h
         ${ETCD_PROTO_OUT}/etcd/rpc.pb-c.c ${ETCD_PROTO_OUT}/etcd/rpc.pb-c.h
  COMMAND ${PROTOC_C} --c_out=${ETCD_PROTO_OUT} --proto_path=${ETCD_PROTO_DIR}
          ${ETCD_PROTO_DIR}/etcd/kv.proto ${ETCD_PROTO_DIR}/etcd/rpc.proto
  DEPENDS ${ETCD_PROTO_DIR}/etcd/kv.proto ${ETCD_PROTO_DIR}/etcd/rpc.proto
  COMMENT "protoc-c etcd/kv.proto etcd/rpc.proto")
set(ETCD_PROTO_SRCS ${ETCD_PROTO_OUT}/etcd/kv.pb-c.c
                    ${ETCD_PROTO_OUT}/etcd/rpc.pb-c.c)
set_source_files_properties(${ETCD_PROTO_SRCS} PROPERTIES COMPILE_OPTIONS "-w")
add_library(detd_etcd_proto STATIC ${ETCD_PROTO_SRCS})
target_include_directories(detd_etcd_proto PUBLIC ${ETCD_PROTO_OUT})
target_link_libraries(detd_etcd_proto PUBLIC PkgConfig::PROTOBUFC)

add_library(detd_etcd STATIC ${CMAKE_CURRENT_SOURCE_DIR}/etcd.c
                             ${CMAKE_CURRENT_SOURCE_DIR}/etcd_kv.c
                             ${CMAKE_CURRENT_SOURCE_DIR}/etcd_stream.c)
target_include_directories(detd_etcd PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(detd_etcd PUBLIC detd_error
                      PRIVATE detd_etcd_proto PkgConfig::GRPC Threads::Threads)

# Integration test against a real 3-member etcd cluster: the C program
# (one case per argument) is driven by tests/integration/test_etcd_adapter.py,
# which starts the cluster; ctest runs the pytest file.
if(DETD_BUILD_TESTS)
  add_executable(test_etcd_adapter
                 ${CMAKE_SOURCE_DIR}/tests/integration/test_etcd_adapter.c)
  target_include_directories(test_etcd_adapter
                             PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(test_etcd_adapter PRIVATE detd_etcd Threads::Threads)
endif()
