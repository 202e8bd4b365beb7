# one detd_unit_test(...) line per module test
detd_unit_test(test_store detd_data)
detd_unit_test(test_store_integrity detd_data)
detd_unit_test(test_engine detd_core)
detd_unit_test(test_keyid detd_core)
detd_unit_test(test_search detd_core)
detd_unit_test(test_verify detd_core)
detd_unit_test(test_access detd_core)
detd_unit_test(test_metrics detd_core m)
# The metrics endpoint itself, on a loopback socket (libmicrohttpd).
detd_unit_test(test_metrics_http detd_io)
detd_unit_test(test_wirecheck detd_core detd_proto)
# Allocation-failure tests: the pure modules' allocations go through the
# test's __wrap_* functions, which fail the n-th one on request.
foreach(t test_engine test_keyid test_verify)
  target_link_options(${t} PRIVATE -Wl,--wrap=malloc -Wl,--wrap=calloc
                      -Wl,--wrap=realloc)
endforeach()
if(TARGET detd)
  detd_unit_test(test_client detd detd_wire)
  detd_unit_test(test_wire detd detd_wire detd_proto PkgConfig::GRPC
                 Threads::Threads)
endif()
# The option table and the configuration file reader.
if(TARGET detd_config)
  detd_unit_test(test_options detd_config)
endif()
# Tables: the format module and the loaded set (test files in tests/tables).
detd_unit_test(test_tablefmt detd_common)
detd_unit_test(test_clock detd_common Threads::Threads)
detd_unit_test(test_tables detd_data)
foreach(t test_tablefmt test_tables)
  target_compile_definitions(${t} PRIVATE
                             DETD_TEST_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
endforeach()
detd_unit_test(test_store_vote detd_data)
detd_unit_test(test_store_obs detd_data)
if(TARGET detctl)
  add_executable(test_detctl_table unit/test_detctl_table.c
                 ${CMAKE_SOURCE_DIR}/client/src/detctl_table.c)
  target_include_directories(test_detctl_table PRIVATE
                             ${CMAKE_CURRENT_SOURCE_DIR}/unit
                             ${CMAKE_SOURCE_DIR}/client/src)
  target_link_libraries(test_detctl_table PRIVATE detd detd_wire
                        detd_common PkgConfig::JANSSON)
  add_test(NAME test_detctl_table COMMAND test_detctl_table)
  add_executable(test_detctl_merge unit/test_detctl_merge.c
                 ${CMAKE_SOURCE_DIR}/client/src/detctl_merge.c
                 ${CMAKE_SOURCE_DIR}/client/src/detctl_table.c)
  target_include_directories(test_detctl_merge PRIVATE
                             ${CMAKE_CURRENT_SOURCE_DIR}/unit
                             ${CMAKE_SOURCE_DIR}/client/src)
  target_link_libraries(test_detctl_merge PRIVATE detd detd_wire detd_common
                        PkgConfig::JANSSON)
  add_test(NAME test_detctl_merge COMMAND test_detctl_merge)
  add_executable(test_detctl_key unit/test_detctl_key.c
                 ${CMAKE_SOURCE_DIR}/client/src/detctl_key.c)
  target_include_directories(test_detctl_key PRIVATE
                             ${CMAKE_CURRENT_SOURCE_DIR}/unit
                             ${CMAKE_SOURCE_DIR}/client/src)
  add_test(NAME test_detctl_key COMMAND test_detctl_key)
endif()
# app/: the held calls, the one commit path and the etcd coordination,
# each against a link-time fake of the rpc adapter (fake_rpc.c defines
# the rpc_* functions app/ calls, so rpc.o is never linked).
foreach(t test_waiters test_commit test_coord)
  detd_unit_test(${t} detd_app)
  target_sources(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit/fake_rpc.c)
endforeach()
# ops/: a lock's import through etcd (lock.c, lock_etcd.c) over the same
# fake rpc adapter and a fake cluster.
detd_unit_test(test_lock_etcd detd_ops)
target_sources(test_lock_etcd PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit/fake_rpc.c)
# app/: the timings as stored (convert.c; no rpc call).
detd_unit_test(test_convert detd_app)
# common/: lockfiles and how a decision was timed (lockfmt.c, provfmt.c).
detd_unit_test(test_lockfmt detd_lockfmt)
# The etcd backend's boot retry backoff (pure; links the cluster target).
# And the JSON of its etcd values (cluster_codec.c), and the etcd
# adapter's reading of gRPC statuses (etcd_status_err).
if(TARGET detd_cluster)
  detd_unit_test(test_cluster_backoff detd_cluster)
  detd_unit_test(test_cluster_pages detd_cluster)
  detd_unit_test(test_cluster_codec detd_cluster PkgConfig::JANSSON)
  detd_unit_test(test_etcd_status detd_cluster detd_etcd_proto PkgConfig::GRPC)
  detd_unit_test(test_cluster_batch detd_cluster detd_etcd_proto PkgConfig::GRPC
                 PkgConfig::LIBUV PkgConfig::JANSSON)
endif()
