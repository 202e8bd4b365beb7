# Layering check: the folders are layers that use only what lies below them
# (see ARCHITECTURE.md, "Source layout"). `layers` reads the objects of this
# build with nm, so it runs as a test, after the build; `layers_selftest`
# runs the checker on small trees of its own.
find_program(DETD_PYTHON3 python3 REQUIRED)
if(CMAKE_NM)
  set(DETD_LAYERS_NM ${CMAKE_NM})
else()
  set(DETD_LAYERS_NM nm)
endif()
add_test(NAME layers_selftest
         COMMAND ${DETD_PYTHON3} -m pytest -q -p no:cacheprovider
                 ${CMAKE_CURRENT_LIST_DIR}/test_check_layers.py
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(layers_selftest PROPERTIES
                     ENVIRONMENT "CC=${CMAKE_C_COMPILER}" TIMEOUT 120)
add_test(NAME layers
         COMMAND ${DETD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/check_layers.py
                 --nm ${DETD_LAYERS_NM} --include-edges ${CMAKE_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR})
set_tests_properties(layers PROPERTIES TIMEOUT 120)
