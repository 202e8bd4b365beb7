# Deployment checks: deploy/kubernetes and the Dockerfile (static checks,
# Debian 12 package names, the runtime libraries of the built binaries), and
# the daemon's own validation of the ConfigMap's detd.conf.
foreach(suite deploy_manifests deploy_check_config)
  if(suite STREQUAL deploy_manifests)
    set(select "not check_config")
  else()
    set(select "check_config")
  endif()
  add_test(NAME ${suite}
           COMMAND ${DETD_PYTHON3} -m pytest -q -p no:cacheprovider
                   ${CMAKE_SOURCE_DIR}/tests/deploy/test_manifests.py -k ${select}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${suite} PROPERTIES
                       ENVIRONMENT "DETD_BUILD_DIR=${CMAKE_BINARY_DIR}"
                       TIMEOUT 300)
endforeach()
