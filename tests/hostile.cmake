# Hostile input (issue 11): files that are not what they claim, sizes that overflow,
# outputs that are not regular files, and models large enough to expose quadratic compile
# time. Each test is bounded in time and memory.
ffn_c_test(source_file_test SOURCES hostile/source_file_test.c LABELS hostile)
ffn_c_test(outfile_test SOURCES hostile/outfile_test.c LABELS hostile)
# Output to standard output or a full device reports the failure (exit 1), for every
# command that writes: build -o - / -o /dev/full, compare, --dump-ir-after.
add_test(NAME cli_write_errors COMMAND sh ${FFNC_TEST_DIR}/hostile/write_errors_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/write_errors)
set_tests_properties(cli_write_errors PROPERTIES LABELS hostile SKIP_RETURN_CODE 77)
add_test(NAME compile_scale COMMAND sh ${FFNC_TEST_DIR}/hostile/scale_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_8b.ffn ${CMAKE_CURRENT_BINARY_DIR}/compile_scale)
set_tests_properties(compile_scale PROPERTIES LABELS hostile TIMEOUT 120)
# Usage errors exit 2 before any work: an unknown arch, an unknown pass, a group <= 0.
foreach(args "--arch;sm_99" "--dump-ir-after=bogus" "--precision;weights=i4,group=-7" "--precision;weights=i4,group=0")
  string(MAKE_C_IDENTIFIER "${args}" id)
  add_test(NAME cli_usage_${id} COMMAND sh -c "\"$0\" \"$@\"; test $? -eq 2" $<TARGET_FILE:ffnc> build
           ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn --emit cuda -o /dev/null ${args})
  set_tests_properties(cli_usage_${id} PROPERTIES LABELS hostile)
endforeach()
