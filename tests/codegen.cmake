# Code generation: the structure fusion promises (plan_structure_test), and golden files that
# pin the optimized IR, the launch plans and the generated CUDA of small models.
#   FFNC_UPDATE_GOLDEN=1 ctest -R '^cg_'   rewrites them; review the diff: it is the code we emit.
ffn_c_test(plan_structure_test SOURCES codegen/plan_structure_test.c LABELS codegen)
# kernels/gemm_host.h: shared memory and occupancy of every tile configuration, gemm_wq's ring
# and split-K
ffn_c_test(gemm_host_test SOURCES codegen/gemm_host_test.c LABELS codegen)

set(CG_DIR ${FFNC_TEST_DIR}/codegen)
foreach(model examples/llama3_tiny examples/gpt2_tiny examples/phi3_tiny tests/gpu/models/unmerged_gate)
  get_filename_component(name ${model} NAME)
  ffn_golden_test(cg_ir_${name} EXPECT ${CG_DIR}/${name}.ir WORKDIR ${PROJECT_SOURCE_DIR}
    COMMAND $<TARGET_FILE:ffnc> build ${model}.ffn --emit ir --arch sm_90 -o -)
  ffn_golden_test(cg_plan_${name} EXPECT ${CG_DIR}/${name}.plan WORKDIR ${PROJECT_SOURCE_DIR}
    COMMAND $<TARGET_FILE:ffnc> build ${model}.ffn --emit plan --arch sm_90 -o -)
endforeach()
foreach(model examples/llama3_tiny tests/gpu/models/rowwise_ops examples/gpt2_tiny)
  get_filename_component(name ${model} NAME)
  ffn_golden_test(cg_cuda_${name} EXPECT ${CG_DIR}/${name}.cu WORKDIR ${PROJECT_SOURCE_DIR}
    COMMAND $<TARGET_FILE:ffnc> build ${model}.ffn --emit cuda --arch sm_90 -o -)
endforeach()
ffn_c_test(plan_json_test SOURCES codegen/plan_json_test.c LABELS codegen)
ffn_c_test(memplan_test SOURCES codegen/memplan_test.c LABELS codegen)
ffn_c_test(prequant_plan_test SOURCES codegen/prequant_plan_test.c LABELS codegen)
