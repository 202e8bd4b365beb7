# The native autotuning API (detd/autotune.h): argument checks, the flow
# against a real daemon with processes of native_driver (a CPU timer: no
# GPU needed), the C++ header, and nvcc building examples/native/.

add_executable(native_driver ${CMAKE_CURRENT_LIST_DIR}/native_driver.c)
target_link_libraries(native_driver PRIVATE detd)

# The toolkit's CUDA runtime, when installed: test_autotune_args loads it
# through $DETD_CUDA_LIBRARY and expects its own "no device" error.
find_library(DETD_TEST_CUDART NAMES cudart
             HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib ENV CUDA_HOME
             PATH_SUFFIXES lib64 lib NO_CACHE)
add_executable(test_autotune_args ${CMAKE_CURRENT_LIST_DIR}/test_autotune_args.c)
target_link_libraries(test_autotune_args PRIVATE detd)
target_include_directories(test_autotune_args PRIVATE
                           ${CMAKE_CURRENT_LIST_DIR}/../unit)
add_test(NAME test_autotune_args COMMAND test_autotune_args)
if(DETD_TEST_CUDART)
  set_tests_properties(test_autotune_args PROPERTIES
                       ENVIRONMENT "DETD_TEST_CUDART=${DETD_TEST_CUDART}")
endif()

# The C++ header (header-only) against the daemon, driven by the pytest.
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  add_executable(native_cpp ${CMAKE_CURRENT_LIST_DIR}/native_cpp.cpp)
  target_link_libraries(native_cpp PRIVATE detd)
  set_target_properties(native_cpp PROPERTIES CXX_STANDARD 14
                        CXX_STANDARD_REQUIRED ON)
  # The tree's C warning flags, less the one C++ does not know.
  get_target_property(_native_cpp_opts native_cpp COMPILE_OPTIONS)
  list(REMOVE_ITEM _native_cpp_opts -Wstrict-prototypes)
  set_target_properties(native_cpp PROPERTIES COMPILE_OPTIONS
                        "${_native_cpp_opts}")
endif()

detd_pytest(native_api tests/native/test_native.py 600)

# nvcc compiles and links the worked example against this libdetd (it
# cannot run here: no GPU). Without nvcc: skipped, a failure under CI.
add_test(NAME native_example_nvcc
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/nvcc_example.sh
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(native_example_nvcc PROPERTIES
                     SKIP_RETURN_CODE 77 TIMEOUT 600)
