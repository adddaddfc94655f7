# Backward graphs (passes/grad.c): gradients against finite differences on the CPU reference,
# the golden backward IR of one model, and the launch plans of two (the sums over tokens and the
# concatenation of chunk gradients: kernels/grad.cuh) and of one keep backward.
ffn_c_test(grad_fd_test SOURCES ${FFNC_TEST_DIR}/grad/grad_fd_test.c LABELS grad)
# The 16-bit products of backward graphs (the gradient rounded to the forward's type): bf16 and f16
# gradients of three models against the same models in f32, per-type bounds.
ffn_c_test(grad_precision_test SOURCES ${FFNC_TEST_DIR}/grad/grad_precision_test.c LABELS grad)
ffn_golden_test(grad_ir_gpt2_tiny EXPECT ${FFNC_TEST_DIR}/grad/gpt2_tiny.grad.ir WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/gpt2_tiny.ffn --grad --emit ir -o -)
foreach(model llama3_tiny phi3_tiny)
  ffn_golden_test(grad_plan_${model} EXPECT ${FFNC_TEST_DIR}/grad/${model}.grad.plan WORKDIR ${PROJECT_SOURCE_DIR}
                  COMMAND $<TARGET_FILE:ffnc> build examples/${model}.ffn --grad --emit plan --arch sm_90 -o -)
endforeach()
# The keep backward of llama3_tiny: each layer's dgrad of the down product stores its product alone
# and one rowwise kernel reads the saved gate and up and that product (passes/fuse.c: a GEMM epilogue
# reads at most one tensor of its shape).
ffn_golden_test(grad_plan_keep_llama3_tiny EXPECT ${FFNC_TEST_DIR}/grad/llama3_tiny.grad_keep.plan
                WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/llama3_tiny.ffn --grad --keep --emit plan --arch sm_90 -o -)
ffn_golden_test(grad_no_rule EXPECT ${FFNC_TEST_DIR}/grad/no_rule.out WORKDIR ${PROJECT_SOURCE_DIR}
                COMMAND $<TARGET_FILE:ffnc> build examples/llama3_tiny.ffn --grad --tp 2 --tp-rank 0 --emit ir -o -)
add_test(NAME grad_cli COMMAND sh ${FFNC_TEST_DIR}/grad/cli_grad_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn)
set_tests_properties(grad_cli PROPERTIES LABELS grad)

# NVRTC compiles the backward graphs of the Llama, GPT and Phi-3 examples and of the fused test
# models (rowsum and concatenated weights) for sm_80 and sm_90, as the JIT does (no GPU needed).
set(GRAD_MODELS examples/llama3_tiny examples/llama3_8b examples/gpt2_tiny examples/gpt2 examples/phi3_tiny
    tests/gpu/models/fused_llama tests/gpu/models/fused_gpt tests/gpu/models/wgrad_tails_f16
    tests/gpu/models/wgrad_tails_bf16 tests/gpu/models/tied_wgrad_bf16)
foreach(model ${GRAD_MODELS})
  get_filename_component(base ${model} NAME)
  foreach(arch sm_80 sm_90)
    add_test(NAME nvrtc_grad_${base}_${arch}
      COMMAND ffnc build ${PROJECT_SOURCE_DIR}/${model}.ffn --grad --arch ${arch}
              -o ${CMAKE_CURRENT_BINARY_DIR}/${base}_grad_${arch}.ffnx)
    set_tests_properties(nvrtc_grad_${base}_${arch} PROPERTIES LABELS "nvrtc;grad"
      ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
  endforeach()
endforeach()

# On the GPU: each backward graph against the CPU reference (every gradient; the seed printed;
# outputs poisoned with NaN first), at 1, 7, 64 and 1000 tokens. Skipped (77) without a GPU.
foreach(model examples/llama3_tiny examples/gpt2_tiny examples/phi3_tiny tests/gpu/models/fused_llama
        tests/gpu/models/fused_gpt tests/gpu/models/gpt_bf16 tests/gpu/models/layernorm_f32
        tests/gpu/models/rowwise_ops tests/gpu/models/swiglu_f16 tests/gpu/models/geglu_oddk_bf16
        tests/gpu/models/wgrad_tails_bf16 tests/gpu/models/tied_wgrad_bf16)
  get_filename_component(base ${model} NAME)
  add_test(NAME gpu_grad_${base} COMMAND gpu_model_test ${model}.ffn --grad)
  set_tests_properties(gpu_grad_${base} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=1,7,64,1000")
endforeach()
# The tensor-core products of backward graphs (dgrad on the GEMM templates, wgrad in matmul_at_tc)
# at token counts with many 32-token steps and a tail: a wide bf16 FFN (70 column tiles of 128) and
# the f16 SwiGLU, against the CPU reference.
foreach(spec wide_swiglu_bf16:1,33,3000 swiglu_f16:100,4100)
  string(REPLACE ":" ";" spec "${spec}")
  list(GET spec 0 base)
  list(GET spec 1 tokens)
  add_test(NAME gpu_grad_${base}_tokens COMMAND gpu_model_test tests/gpu/models/${base}.ffn --grad)
  set_tests_properties(gpu_grad_${base}_tokens PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=${tokens}")
endforeach()
# Weight gradients on sm_90's wgmma (kernels/grad_sm90.cuh; on sm_80 these run matmul_at_tc again):
# bf16 Llama and f16 with tails in every tile dim, from one token to several stages per split and
# split-K over the tokens (the rule's 4-16 splits at 1000-4096 tokens, and 3 forced, two of them
# without tokens at 7); FFNC_WGRAD=mma keeps the mma.sync kernel of sm_90 plans tested.
foreach(spec llama3_tiny:examples/llama3_tiny tails_f16:tests/gpu/models/wgrad_tails_f16)
  string(REPLACE ":" ";" spec "${spec}")
  list(GET spec 0 base)
  list(GET spec 1 model)
  add_test(NAME gpu_grad_wgrad_${base} COMMAND gpu_model_test ${model}.ffn --grad)
  set_tests_properties(gpu_grad_wgrad_${base} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=1,7,64,1000,3000,4096")
  add_test(NAME gpu_grad_wgrad_${base}_splits3 COMMAND gpu_model_test ${model}.ffn --grad)
  set_tests_properties(gpu_grad_wgrad_${base}_splits3 PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_SPLITS=3;FFNC_TEST_TOKENS=7,1000,3000")
endforeach()
# Input gradients reading the weights as they lie on sm_90 (gemm_sm90p.cuh, B_KN: the plans'
# variants tmap_ppkn_128x128x64, the rule, and tmap_coopkn_128x256x64, the cooperative candidate,
# each forced by FFNC_GEMM_VARIANT): dX =
# dY W with W [N_fwd, K_fwd] loaded by TMA in 64-column boxes and read MN-major, no transposed copy.
# bf16 and f16 with tails in every dim (N = 360: a 104-column tile whose second box holds 40
# columns; N = 200: a box of 8; K = 200 and 360: a partial last k-tile; M: 1, 7, 1000, 3000 rows),
# unsplit and split-K (the rule's splits at few tokens, 3 forced), against the CPU reference.
foreach(variant ppkn_128x128x64 coopkn_128x256x64)
  string(REGEX REPLACE "_.*" "" vname ${variant})
  set(suffix "")
  if(NOT vname STREQUAL "ppkn")
    set(suffix "_${vname}")
  endif()
  foreach(spec bkn_tails_bf16:tests/gpu/models/wgrad_tails_bf16:1,7,64,1000,3000:
          bkn_tails_bf16_splits3:tests/gpu/models/wgrad_tails_bf16:7,1000,3000:FFNC_GEMM_SPLITS=3
          bkn_tails_f16:tests/gpu/models/wgrad_tails_f16:1,7,64,1000,3000:
          bkn_llama3_tiny:examples/llama3_tiny:1,64,1000,4096:)
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 base)
    list(GET spec 1 model)
    list(GET spec 2 tokens)
    list(GET spec 3 env)
    add_test(NAME gpu_grad_${base}${suffix} COMMAND gpu_model_test ${model}.ffn --grad)
    set_tests_properties(gpu_grad_${base}${suffix} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
      ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=tmap_${variant};FFNC_TEST_TOKENS=${tokens};${env}")
  endforeach()
endforeach()
add_test(NAME gpu_grad_wgrad_llama3_tiny_mma COMMAND gpu_model_test examples/llama3_tiny.ffn --grad)
set_tests_properties(gpu_grad_wgrad_llama3_tiny_mma PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
  ENVIRONMENT "${FFNC_GPU_ENV};FFNC_WGRAD=mma;FFNC_TEST_TOKENS=1,64,1000,3000")
add_test(NAME gpu_grad_llama3_tiny_aot COMMAND gpu_model_test examples/llama3_tiny.ffn --grad --aot)
set_tests_properties(gpu_grad_llama3_tiny_aot PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
  ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=1,7,64,1000")
add_test(NAME gpu_grad_llama3_tiny_O0 COMMAND gpu_model_test examples/llama3_tiny.ffn --grad -O0)
set_tests_properties(gpu_grad_llama3_tiny_O0 PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
  ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=1,7,64,1000")

# ffn_model_run_grad (the C API for training) on the GPU: gradients accumulated into or written to
# f32, bf16 and mixed tensors, one not wanted, and accumulation captured in a CUDA graph and
# replayed, each against the CPU reference at 1, 7, 64 and 1000 tokens. Skipped (77) without a GPU.
add_executable(grad_api_test gpu/grad_api_test.c)
target_include_directories(grad_api_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(grad_api_test PRIVATE ffn)
foreach(model examples/llama3_tiny tests/gpu/models/layernorm_f32)
  get_filename_component(base ${model} NAME)
  add_test(NAME gpu_grad_api_${base} COMMAND grad_api_test ${model}.ffn)
  set_tests_properties(gpu_grad_api_${base} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV}")
endforeach()
# The weight gradients written straight into the caller's tensors by the wgrad kernels' direct forms
# on sm_90 (runtime/grad.c: grad_plan_direct) against the staged path (FFNC_GRAD_DIRECT=0): f32, bf16
# and mixed accumulation, bf16 writes and a replayed CUDA graph, each against the CPU reference and
# bit for bit the same as staged, with N gradients written directly per call (--direct N): Llama's 12
# weights; bf16 tails on every tile dim, split over the tokens by the rule (1000, 3000 tokens) and by
# force (3 splits, two of them without tokens at 7); a tied weight, whose summed gradient stays
# staged beside the untied one's. Skipped (77) without a GPU.
foreach(spec llama3_tiny:examples/llama3_tiny:12:1,7,64,1000: wgrad_tails_bf16:tests/gpu/models/wgrad_tails_bf16:3:1,7,64,1000,3000:
        wgrad_tails_bf16_splits3:tests/gpu/models/wgrad_tails_bf16:3:7,1000,3000:FFNC_GEMM_SPLITS=3
        tied_wgrad_bf16:tests/gpu/models/tied_wgrad_bf16:1:1,64,1000:)
  string(REPLACE ":" ";" spec "${spec}")
  list(GET spec 0 base)
  list(GET spec 1 model)
  list(GET spec 2 direct)
  list(GET spec 3 tokens)
  list(GET spec 4 env)
  add_test(NAME gpu_grad_api_direct_${base} COMMAND grad_api_test ${model}.ffn --direct ${direct})
  set_tests_properties(gpu_grad_api_direct_${base} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=${tokens};${env}")
endforeach()
# The keep policy on the CPU reference: the backward graph reading the training forward's saved
# tensors gives the recompute gradients bit for bit (Llama, GPT, Phi-3, two FFN Fusion groups, a
# layernorm model; T = 1, 7, 64); the saved-tensor interface and the refusals of bad ones.
ffn_c_test(grad_keep_test SOURCES ${FFNC_TEST_DIR}/grad/grad_keep_test.c LABELS grad)
# The keep policy on the GPU: the training forward's outputs and saved tensors, then the backward
# graph reading them through ffn_model_run_grad, against the CPU reference at 1, 64 and 1000 tokens
# (outputs poisoned first, seed printed), and the refusals of missing or misshapen saved tensors;
# then again with the two models sharing one workspace (ffn_model_share_workspace), one after the pair.
add_executable(grad_keep_gpu_test gpu/grad_keep_test.c)
target_include_directories(grad_keep_gpu_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(grad_keep_gpu_test PRIVATE ffn)
foreach(model examples/llama3_tiny examples/gpt2_tiny examples/phi3_tiny tests/gpu/models/fused_llama
        tests/gpu/models/layernorm_f32)
  get_filename_component(base ${model} NAME)
  add_test(NAME gpu_grad_keep_${base} COMMAND grad_keep_gpu_test ${model}.ffn)
  set_tests_properties(gpu_grad_keep_${base} PROPERTIES LABELS "gpu;grad" SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=1,64,1000")
endforeach()
# NVRTC compiles the keep policy's training forward and backward graph (no GPU needed).
foreach(model examples/llama3_tiny examples/llama3_8b examples/gpt2_tiny examples/phi3_tiny tests/gpu/models/fused_llama)
  get_filename_component(base ${model} NAME)
  foreach(grad "" "--grad")
    string(REPLACE "--" "_" suffix "keep${grad}")
    add_test(NAME nvrtc_${suffix}_${base} COMMAND ffnc build ${PROJECT_SOURCE_DIR}/${model}.ffn --keep ${grad}
             --arch sm_90 -o ${CMAKE_CURRENT_BINARY_DIR}/${base}_${suffix}.ffnx)
    set_tests_properties(nvrtc_${suffix}_${base} PROPERTIES LABELS "nvrtc;grad"
      ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
  endforeach()
endforeach()

# Every model through the code generator in every mode (a fusion rule that makes a kernel the
# generator cannot emit is caught here, without a GPU or NVRTC).
add_test(NAME grad_codegen_sweep COMMAND sh ${FFNC_TEST_DIR}/grad/codegen_sweep.sh $<TARGET_FILE:ffnc> ${PROJECT_SOURCE_DIR})
set_tests_properties(grad_codegen_sweep PROPERTIES LABELS grad)
