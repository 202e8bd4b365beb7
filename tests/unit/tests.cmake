# one detd_unit_test(...) line per module test
detd_unit_test(test_store detd_store)
detd_unit_test(test_engine detd_pure)
detd_unit_test(test_keyid detd_pure)
detd_unit_test(test_verify detd_pure)
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
detd_unit_test(test_store_vote detd_store)
