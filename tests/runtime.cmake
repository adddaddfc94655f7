# Runtime without a GPU: the kernel cache, NVRTC error reporting, and what the GPU paths say
# where there is no GPU.
ffn_c_test(cache_test SOURCES runtime/cache_test.c LABELS nvrtc)
add_test(NAME no_gpu COMMAND sh ${FFNC_TEST_DIR}/runtime/no_gpu_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/no_gpu)
set_tests_properties(no_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS runtime)
# ffn_program_load of good, damaged and stale AOT files (no GPU, no NVRTC needed)
ffn_c_test(aot_load_test SOURCES runtime/aot_load_test.c LABELS runtime)
# ffnc build --emit cubin|ptx through a damaged and an untrusted kernel cache (NVRTC, no GPU)
add_test(NAME cache_cli COMMAND sh ${FFNC_TEST_DIR}/runtime/cache_cli_test.sh $<TARGET_FILE:ffnc>
         ${CMAKE_CURRENT_BINARY_DIR}/cache_cli)
set_tests_properties(cache_cli PROPERTIES LABELS nvrtc)
# the programs NVRTC compiles for a plan: every kernel in exactly one, the runtime's shared (no NVRTC)
ffn_c_test(units_test SOURCES runtime/units_test.c LABELS runtime)
# which compiled unit holds each kernel, as the loader guesses it from the images (NVRTC, no GPU)
ffn_c_test(image_names_test SOURCES runtime/image_names_test.c LABELS nvrtc)
# one package from one thread or four; -v; an edited model compiles only its new kernel (NVRTC, no GPU)
add_test(NAME jit_units COMMAND sh ${FFNC_TEST_DIR}/runtime/jit_units_test.sh $<TARGET_FILE:ffnc>
         ${CMAKE_CURRENT_BINARY_DIR}/jit_units)
set_tests_properties(jit_units PROPERTIES LABELS nvrtc)
# Tensor parallel without NCCL or GPUs: the loader names a missing or wrong FFNC_NCCL_LIBRARY
# and how to point at one, and loads a real one where installed (skipped elsewhere); --tp 8 on
# a machine with fewer GPUs is refused before compiling.
foreach(mode missing not_nccl real)
  ffn_c_test(nccl_load_${mode} SOURCES runtime/nccl_load_test.c LABELS runtime ARGS ${mode})
endforeach()
set_tests_properties(nccl_load_missing PROPERTIES ENVIRONMENT "FFNC_NCCL_LIBRARY=/nonexistent/libnccl.so.2")
set_tests_properties(nccl_load_not_nccl PROPERTIES ENVIRONMENT "FFNC_NCCL_LIBRARY=libm.so.6")
add_test(NAME tp_devices COMMAND sh ${FFNC_TEST_DIR}/runtime/tp_devices_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/tp_devices)
set_tests_properties(tp_devices PROPERTIES SKIP_RETURN_CODE 77 LABELS runtime)
# A tensor-parallel share's weight windows: which weights narrow, the narrowed plan's shapes,
# and the slices the kernels read unchanged (no GPU)
ffn_c_test(tp_weights_test SOURCES runtime/tp_weights_test.c LABELS runtime)
# A large call in row blocks, its all-reduces overlapped (runtime/tp_overlap.c): the blocks'
# boundaries, which plans can be cut, the order of the streams' work (no GPU)
ffn_c_test(tp_overlap_test SOURCES runtime/tp_overlap_test.c LABELS runtime)
# rt.h's NCCL values against nccl.h, where the toolkit has one (ffnc itself never needs it)
find_path(FFNC_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(FFNC_NCCL_INCLUDE_DIR)
  ffn_c_test(nccl_abi_test SOURCES runtime/nccl_abi_test.c LABELS runtime)
  target_include_directories(nccl_abi_test SYSTEM PRIVATE ${FFNC_NCCL_INCLUDE_DIR})
endif()
# Tuned GEMM choices (runtime/tune.h): the file's round trip, damaged and foreign files refused,
# the bucket of a call, and how a run chooses with them (no GPU)
ffn_c_test(tune_store_test SOURCES runtime/tune_store_test.c LABELS runtime)
# ffn_model_tune end to end against a simulated driver (launch grids, operands, workspaces,
# the choice of the fastest, the files, loading them; no GPU, no NVRTC)
ffn_c_test(tune_sim_test SOURCES runtime/tune_sim_test.c LABELS runtime
           ARGS bench/suite/llama3_8b_layer.ffn bench/suite/gpt_gelu_4096.ffn bench/suite/llama3_8b_layer_i4g128.ffn
                bench/suite/llama3_8b_layer_f8.ffn bench/suite/llama3_8b_4layers.ffn examples/llama3_tiny.ffn)
# the built-in rule's tile configuration per row count on the suite's shapes (no GPU)
ffn_c_test(gemm_rule_test SOURCES runtime/gemm_rule_test.c LABELS runtime)
# ffn_model_run_grad's argument checks on a backward graph's plan, ffn_model_share_workspace's (no GPU)
ffn_c_test(grad_args_test SOURCES runtime/grad_args_test.c LABELS "runtime;grad")
# Workspace pools (runtime/exec.c) on a fake driver: a model's own, and one shared by a forward
# and its backward graph (ffn_model_share_workspace): sizes, headroom, references (no GPU)
ffn_c_test(workspace_pool_test SOURCES runtime/workspace_pool_test.c LABELS "runtime;grad")
