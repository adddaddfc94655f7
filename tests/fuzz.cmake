# libFuzzer targets (clang only, with FFNC_FUZZ=ON): the front end and the safetensors reader.

# Whether this compiler links libFuzzer (FFNC_HAVE_LIBFUZZER), probed once for both fuzzers: a
# clang without compiler-rt cannot, and is told so rather than breaking the build.
if(FFNC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer,address,undefined)
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer,address,undefined)
  check_c_source_compiles("#include <stddef.h>
    int LLVMFuzzerTestOneInput(const unsigned char *d, size_t n) { return d && n; }"
    FFNC_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT FFNC_HAVE_LIBFUZZER)
    message(WARNING "FFNC_FUZZ: ${CMAKE_C_COMPILER} cannot link -fsanitize=fuzzer; the fuzzers are not built")
  endif()
endif()

# ---- the front end ----
#
# The front-end and IR sources and the generated lexer and parser are compiled into the fuzzer itself, so they
# carry its coverage and sanitizer instrumentation (the `ffn` library is built without).
#
# ctest -L fuzz runs it for ~20 s from the seeds: tests/fuzz/corpus_parser (small broken
# files), the examples and the front end's test files. New inputs go to a corpus directory
# in the build tree; the seeds are only read. To fuzz longer:
#   build/tests/fuzz_parser -dict=build/tests/fuzz_parser.dict -max_len=4096 CORPUS_DIR \
#     tests/fuzz/corpus_parser examples tests/frontend/diag tests/frontend/ir
if(FFNC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang" AND FFNC_HAVE_LIBFUZZER)
  set(FUZZ_FE_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  add_executable(fuzz_parser
    ${FFNC_TEST_DIR}/fuzz/fuzz_parser.c
    ${FFNC_FRONTEND_ALONE_SOURCES})
  target_include_directories(fuzz_parser PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/frontend
                             ${PROJECT_BINARY_DIR}/gen)
  target_compile_options(fuzz_parser PRIVATE ${FUZZ_FE_FLAGS} -g -O1)
  target_link_options(fuzz_parser PRIVATE ${FUZZ_FE_FLAGS})
  target_link_libraries(fuzz_parser PRIVATE m)

  # The words of the language, so the fuzzer builds statements rather than noise. The builtin
  # functions of the op table (ir/ops.def rows marked BUILTIN) are read from it.
  set(FUZZ_FE_DICT ${CMAKE_CURRENT_BINARY_DIR}/fuzz_parser.dict)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/ir/ops.def)
  file(STRINGS ${PROJECT_SOURCE_DIR}/ir/ops.def op_rows REGEX "^UNARY_OP\\([A-Z_0-9]+, *[a-z_0-9]+, *BUILTIN\\)")
  set(op_builtins "")
  foreach(row ${op_rows})
    string(REGEX REPLACE "^UNARY_OP\\([A-Z_0-9]+, *([a-z_0-9]+),.*" "\\1" name "${row}")
    list(APPEND op_builtins ${name})
  endforeach()
  if(NOT op_builtins)
    message(FATAL_ERROR "fuzz.cmake: no BUILTIN rows found in ir/ops.def (has the row format changed?)")
  endif()
  set(words model dim const input weight output block return for in precision fuse ffn
            default accumulate norm matmul weights group f32 f16 bf16 f8e4m3 f8e5m2 i8 i4
            ${op_builtins} swiglu geglu rmsnorm layernorm chunk cast
            ".." "^T" "@" "\\\"" "{i}" "[T, D]" "\\x0A")
  set(dict "")
  foreach(w ${words})
    string(APPEND dict "\"${w}\"\n")
  endforeach()
  file(WRITE ${FUZZ_FE_DICT} "${dict}")

  set(FUZZ_FE_WORK ${CMAKE_CURRENT_BINARY_DIR}/fuzz_parser_corpus)
  file(MAKE_DIRECTORY ${FUZZ_FE_WORK})
  add_test(NAME fuzz_parser
    COMMAND fuzz_parser -max_total_time=20 -timeout=5 -rss_limit_mb=2048 -max_len=4096
            -dict=${FUZZ_FE_DICT}
            -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz_parser-
            ${FUZZ_FE_WORK} ${FFNC_TEST_DIR}/fuzz/corpus_parser ${FFNC_EXAMPLES_DIR}
            ${FFNC_TEST_DIR}/frontend/diag ${FFNC_TEST_DIR}/frontend/ir
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(fuzz_parser PROPERTIES LABELS fuzz TIMEOUT 120)
endif()

# ---- the safetensors reader ----
#
# The sources it tests are compiled into the fuzzer itself, so that they carry the fuzzer's
# coverage and sanitizer instrumentation (the `ffn` library is built without them).
#
# ctest -L fuzz runs it for a bounded time from the seed corpus. New inputs go to a corpus
# directory in the build tree; the seeds in the source tree are only read. To fuzz longer:
#   build/tests/fuzz_safetensors -dict=tests/safetensors/safetensors.dict CORPUS_DIR tests/fuzz/corpus_safetensors
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
