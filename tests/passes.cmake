# The passes preserve meaning: the reference interpreter on the optimized IR agrees with it on
# the front end's IR, for every example and GPU test model (no GPU needed).
add_executable(passes_semantics_test passes/passes_semantics_test.c)
target_include_directories(passes_semantics_test PRIVATE ${CMAKE_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(passes_semantics_test PRIVATE ffn)
file(GLOB PASS_TEST_MODELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/examples/*_tiny.ffn ${FFNC_TEST_DIR}/gpu/models/*.ffn)
foreach(m ${PASS_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${m})
  add_test(NAME passes_${base} COMMAND passes_semantics_test ${rel})
  set_tests_properties(passes_${base} PROPERTIES LABELS passes ENVIRONMENT "FFNC_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endforeach()
