# safetensors reader and writer (runtime/safetensors.c). The fuzzer is in fuzz.cmake.
set(ST_TESTS ${FFNC_TEST_DIR}/safetensors)
ffn_c_test(safetensors_roundtrip SOURCES ${ST_TESTS}/test_roundtrip.c LABELS safetensors)
ffn_c_test(safetensors_malformed SOURCES ${ST_TESTS}/test_malformed.c LABELS safetensors)
ffn_c_test(safetensors_save SOURCES ${ST_TESTS}/test_save.c LABELS safetensors)

# Writes the fuzzer's seed corpus (tests/fuzz/corpus_safetensors); not built by default:
#   cmake --build build --target st_gen_corpus && build/tests/st_gen_corpus tests/fuzz/corpus_safetensors
add_executable(st_gen_corpus EXCLUDE_FROM_ALL ${ST_TESTS}/gen_corpus.c)
target_include_directories(st_gen_corpus PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(st_gen_corpus PRIVATE ffn)

# Pre-quantized fp8 checkpoints (ir/prequant.h) through `ffnc gen`, `run --device cpu` and
# `compare`, and every bad checkpoint refused with its message and no output file.
ffn_c_test(prequant_ckpt_test SOURCES ${ST_TESTS}/prequant_ckpt_test.c LABELS safetensors ARGS $<TARGET_FILE:ffnc>)
