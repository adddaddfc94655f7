# The installed library as a user sees it: `cmake --install` into a temporary prefix, then the
# host examples built against it through find_package(ffnc) (shared and static) and through
# pkg-config, run as far as a machine without a GPU allows; only ffn_ names exported.
list(GET CUDAToolkit_INCLUDE_DIRS 0 FFNC_CUDA_INCLUDE)
add_test(NAME install
  COMMAND sh ${FFNC_TEST_DIR}/install/install_test.sh ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR}
          ${CMAKE_CURRENT_BINARY_DIR}/install ${PROJECT_SOURCE_DIR} ${CMAKE_INSTALL_LIBDIR}
          ${CMAKE_C_COMPILER} ${FFNC_CUDA_INCLUDE} ${CUDAToolkit_LIBRARY_DIR})
set_tests_properties(install PROPERTIES LABELS install RUN_SERIAL ON
  ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
