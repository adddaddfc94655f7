# libFuzzer target for the safetensors reader: clang only, with FFNC_FUZZ=ON. The sources it
# tests are compiled into the fuzzer itself, so that they carry the fuzzer's coverage and
# sanitizer instrumentation (the `ffn` library is built without them).
#
# ctest -L fuzz runs it for a bounded time from the seed corpus. New inputs go to a corpus
# directory in the build tree; the seeds in the source tree are only read. To fuzz longer:
#   build/tests/fuzz_safetensors -dict=tests/safetensors/safetensors.dict CORPUS_DIR tests/fuzz/corpus_safetensors
if(FFNC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  # A clang without compiler-rt cannot link fuzzers: say so rather than break the build.
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer,address,undefined)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer,address,undefined)
  check_c_source_compiles("#include <stddef.h>
    int LLVMFuzzerTestOneInput(const unsigned char *d, size_t n) { return d && n; }"
    FFNC_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT FFNC_HAVE_LIBFUZZER)
    message(WARNING "FFNC_FUZZ: ${CMAKE_C_COMPILER} cannot link -fsanitize=fuzzer; fuzz_safetensors not built")
  endif()
endif()
if(FFNC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang" AND FFNC_HAVE_LIBFUZZER)
  set(FUZZ_ST_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  add_executable(fuzz_safetensors
    ${FFNC_TEST_DIR}/fuzz/fuzz_safetensors.c
    ${PROJECT_SOURCE_DIR}/runtime/safetensors.c
    ${PROJECT_SOURCE_DIR}/runtime/outfile.c
    ${PROJECT_SOURCE_DIR}/ir/dtype.c
    ${PROJECT_SOURCE_DIR}/ir/arena.c)
  target_include_directories(fuzz_safetensors PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(fuzz_safetensors PRIVATE ${FUZZ_ST_FLAGS} -g -O1)
  target_link_options(fuzz_safetensors PRIVATE ${FUZZ_ST_FLAGS})
  target_link_libraries(fuzz_safetensors PRIVATE PkgConfig::JANSSON)

  set(FUZZ_ST_WORK ${CMAKE_CURRENT_BINARY_DIR}/fuzz_safetensors_corpus)
  file(MAKE_DIRECTORY ${FUZZ_ST_WORK})
  add_test(NAME fuzz_safetensors
    COMMAND fuzz_safetensors -max_total_time=20 -timeout=5 -rss_limit_mb=2048
            -dict=${FFNC_TEST_DIR}/safetensors/safetensors.dict
            -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz_safetensors-
            ${FUZZ_ST_WORK} ${FFNC_TEST_DIR}/fuzz/corpus_safetensors
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(fuzz_safetensors PROPERTIES LABELS fuzz TIMEOUT 120)
endif()
