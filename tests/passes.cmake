# The passes preserve meaning: the reference interpreter on the optimized IR agrees with it on
# the front end's IR, for every example and GPU test model (no GPU needed).
add_executable(passes_semantics_test passes/passes_semantics_test.c)
target_include_directories(passes_semantics_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(passes_semantics_test PRIVATE ffn)
file(GLOB PASS_TEST_MODELS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/examples/*_tiny.ffn ${FFNC_TEST_DIR}/gpu/models/*.ffn)
foreach(m ${PASS_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${m})
  add_test(NAME passes_${base} COMMAND passes_semantics_test ${rel})
  set_tests_properties(passes_${base} PROPERTIES LABELS passes ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()
# The backward graphs the GPU tests run (tests/grad.cmake: gpu_grad_*), through the same pipeline.
foreach(model examples/llama3_tiny examples/gpt2_tiny examples/phi3_tiny tests/gpu/models/fused_llama
        tests/gpu/models/fused_gpt tests/gpu/models/gpt_bf16 tests/gpu/models/layernorm_f32
        tests/gpu/models/rowwise_ops tests/gpu/models/swiglu_f16 tests/gpu/models/geglu_oddk_bf16
        tests/gpu/models/wgrad_tails_f16)
  get_filename_component(base ${model} NAME)
  add_test(NAME passes_grad_${base} COMMAND passes_semantics_test ${model}.ffn --grad)
  set_tests_properties(passes_grad_${base} PROPERTIES LABELS "passes;grad" ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()

# FFN Fusion: the fused form against its definition written out (tests/passes/fusion/NAME.ffn
# and NAME.sum.ffn), and the kernel launches of the compiled fused program.
add_executable(ffn_fusion_test passes/ffn_fusion_test.c)
target_include_directories(ffn_fusion_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(ffn_fusion_test PRIVATE ffn)
foreach(pair "llama 2" "gpt 4" "mixed 4")
  separate_arguments(pair)
  list(GET pair 0 name)
  list(GET pair 1 launches)
  add_test(NAME ffn_fusion_${name}
           COMMAND ffn_fusion_test tests/passes/fusion/${name}.ffn tests/passes/fusion/${name}.sum.ffn ${launches})
  set_tests_properties(ffn_fusion_${name} PROPERTIES LABELS passes ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endforeach()

# ffnc analyze on models whose answer is known (independent and dependent sublayers), on the
# CPU reference and, where there is a GPU, on the compiled kernels.
add_executable(analyze_test passes/analyze_test.c)
target_include_directories(analyze_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(analyze_test PRIVATE ffn)
add_test(NAME analyze_cpu COMMAND analyze_test $<TARGET_FILE:ffnc> cpu ${CMAKE_CURRENT_BINARY_DIR}/analyze_cpu)
set_tests_properties(analyze_cpu PROPERTIES LABELS passes ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
add_test(NAME gpu_analyze COMMAND analyze_test $<TARGET_FILE:ffnc> gpu ${CMAKE_CURRENT_BINARY_DIR}/analyze_gpu)
set_tests_properties(gpu_analyze PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
                     ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR};FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")

# The IR before and after the FFN Fusion pass (and the rest of the -O0 pipeline) for the fused
# Llama and mixed-width models: tests/passes/fusion/NAME.passes.ir.
foreach(name llama mixed)
  ffn_golden_test(passes_ir_ffn_fusion_${name}
    EXPECT ${FFNC_TEST_DIR}/passes/fusion/${name}.passes.ir
    WORKDIR ${FFNC_TEST_DIR}/passes/fusion
    COMMAND $<TARGET_FILE:ffnc> build ${name}.ffn --emit ir -o - -O0 --dump-ir-after=all)
endforeach()

# Random valid programs (tests/passes/diff_gen_test.c): the reference after every pass against
# the source, and each compiled for sm_90. A failure prints the seed to replay and the program.
# CI runs a fixed set (seeds 1..400, under a second); without FFNC_TEST_SEED each run draws new ones.
add_executable(diff_gen_test passes/diff_gen_test.c)
target_include_directories(diff_gen_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(diff_gen_test PRIVATE ffn)
add_test(NAME passes_random_programs COMMAND diff_gen_test 400)
set_tests_properties(passes_random_programs PROPERTIES LABELS passes TIMEOUT 60 ENVIRONMENT "FFNC_TEST_SEED=1")

# Tensor parallel on the CPU: the ranks of --tp N (2, 4) in lockstep against the unsharded
# program, Llama, GPT and fused models at T = 1, 7, 64.
ffn_c_test(tp_test SOURCES ${FFNC_TEST_DIR}/passes/tp_test.c LABELS passes)

# The IR verifier refuses broken graphs (a stale const flag, operands out of order or dead, a
# wrong shape, type or operand count, no outputs) and names the node.
add_executable(verify_test passes/verify_test.c)
target_include_directories(verify_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(verify_test PRIVATE ffn)
add_test(NAME verify_graph_refusals COMMAND verify_test)
set_tests_properties(verify_graph_refusals PROPERTIES LABELS passes ENVIRONMENT "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
