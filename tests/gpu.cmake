# GPU tests (label gpu): every model on the GPU against the CPU reference; they exit 77 (skip)
# with the reason where there is no GPU. NVRTC compilation of every example for sm_80 and
# sm_90 (label nvrtc) needs no GPU and runs everywhere.

add_executable(gpu_model_test gpu/gpu_model_test.c)
target_include_directories(gpu_model_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(gpu_model_test PRIVATE ffn)

set(FFNC_GPU_ENV "FFNC_SOURCE_DIR=${PROJECT_SOURCE_DIR};FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")

function(ffn_gpu_model_test name model)
  add_test(NAME ${name} COMMAND gpu_model_test ${model} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")
endfunction()

# A model under extra environment `env` (a ;-list: FFNC_TEST_TOKENS=..., knobs).
function(ffn_gpu_env_test name model env)
  add_test(NAME ${name} COMMAND gpu_model_test ${model})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV};${env}")
endfunction()

# A model with its GEMMs forced onto `variants` (FFNC_GEMM_VARIANT) at `tokens`, and split-K (3
# splits) at 7, 130 and 1000 tokens, or at the optional fifth argument's: tests NAME and NAME_split3.
function(ffn_gpu_forced_test name model variants tokens)
  set(split_tokens 7,130,1000)
  if(ARGC GREATER 4)
    set(split_tokens ${ARGV4})
  endif()
  add_test(NAME ${name} COMMAND gpu_model_test ${model})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=${variants};FFNC_TEST_TOKENS=${tokens}")
  add_test(NAME ${name}_split3 COMMAND gpu_model_test ${model})
  set_tests_properties(${name}_split3 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=${variants};FFNC_GEMM_SPLITS=3;FFNC_TEST_TOKENS=${split_tokens}")
endfunction()

ffn_gpu_model_test(gpu_llama3_tiny examples/llama3_tiny.ffn)
ffn_gpu_model_test(gpu_llama3_tiny_O0 examples/llama3_tiny.ffn -O0)
ffn_gpu_model_test(gpu_llama3_tiny_aot examples/llama3_tiny.ffn --aot)
ffn_gpu_model_test(gpu_phi3_tiny examples/phi3_tiny.ffn)
ffn_gpu_model_test(gpu_gpt2_tiny examples/gpt2_tiny.ffn)
ffn_gpu_model_test(gpu_fused_llama_aot tests/gpu/models/fused_llama.ffn --aot)
ffn_gpu_model_test(gpu_wq_llama_i4g32_aot tests/gpu/models/wq_llama_i4g32_bf16.ffn --aot)
# fp8 on Hopper: the wgmma kernels at every M (64-row tiles, promotion), forced, and the
# mma.sync ones Hopper emulates through f16, forced too: both must match the reference.
foreach(cfg tma_64x128x64 tma_128x128x64 sm80_32x128x64)
  add_test(NAME gpu_f8_llama_${cfg} COMMAND gpu_model_test tests/gpu/models/f8_llama_e4m3_bf16.ffn)
  set_tests_properties(gpu_f8_llama_${cfg} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=${cfg}")
endforeach()

# The persistent TMA kernels (kernels/gemm_sm90p.cuh), forced at every M: ping-pong and
# cooperative, gated (S 2) and not (S 1, LayerNorm), unsplit and split-K (3 splits: the partials'
# protocol with tiles that several CTAs loop over).
foreach(cfg tmap_pp_128x128x64 tmap_coop_128x256x64)
  foreach(model llama3_tiny gpt2_tiny)
    add_test(NAME gpu_${cfg}_${model} COMMAND gpu_model_test examples/${model}.ffn)
    set_tests_properties(gpu_${cfg}_${model} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
      ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=${cfg};FFNC_TEST_TOKENS=1,7,64,130,1000,4096")
    add_test(NAME gpu_${cfg}_${model}_split3 COMMAND gpu_model_test examples/${model}.ffn)
    set_tests_properties(gpu_${cfg}_${model}_split3 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
      ENVIRONMENT "${FFNC_GPU_ENV};FFNC_GEMM_VARIANT=${cfg};FFNC_GEMM_SPLITS=3;FFNC_TEST_TOKENS=7,130,1000")
  endforeach()
endforeach()

# fp8 on the persistent cooperative kernel (promotion per 64 x 128 block) and on three consumer
# warpgroups (192-row tiles): e4m3 gated and e5m2 with f16 and LayerNorm, unsplit and with 3 splits.
foreach(cfg tmap_coop_128x256x64 tma_192x128x64)
  foreach(model f8_llama_e4m3_bf16 f8_gpt_e5m2_f16)
    ffn_gpu_forced_test(gpu_${cfg}_${model} tests/gpu/models/${model}.ffn ${cfg} "1,7,64,130,1000,4096")
  endforeach()
endforeach()

# The clustered TMA kernels (2-CTA clusters multicasting A, kernels/gemm_sm90.cuh "Clusters"),
# forced at every M in both widths: gated with 11 column tiles (llama3_tiny: the last cluster's
# second CTA has no tile), LayerNorm with both row statistics in the GEMM (gpt_bf16), one column
# tile and one k-tile (geglu_oddk_bf16: 3 splits leave two without a k-tile), the 224-wide tile
# (wide_swiglu_bf16), and fp8 (128 wide, promotion): e4m3 gated, e5m2 with f16 and LayerNorm;
# unsplit and split-K. (gpt2_tiny is f32: its GEMMs run on the FMA path.)
foreach(model examples/llama3_tiny tests/gpu/models/gpt_bf16 tests/gpu/models/geglu_oddk_bf16
        tests/gpu/models/wide_swiglu_bf16 tests/gpu/models/f8_llama_e4m3_bf16 tests/gpu/models/f8_gpt_e5m2_f16)
  get_filename_component(base ${model} NAME)
  ffn_gpu_forced_test(gpu_tmac_${base} ${model}.ffn "tmac_128x128x64,tmac_128x224x64" "1,7,64,130,1000,4096")
endforeach()

# The sm_90 epilogue's 16-bit stores 4 columns (8 bytes) wide (kernels/gemm_sm90.cuh,
# sm90_epi_quads: lanes l and l ^ 1 swap a pair), forced on each wgmma kernel, unsplit and split-K,
# with rows past M: bf16 with every column tail (epi_tails_bf16: a lone 8-column group, a 4-column
# one, an odd width stored pair by pair) and f16 with lone 8-column groups (wgrad_tails_f16).
foreach(cfg tma_128x128x64 tma_128x256x64 tmac_128x128x64 tmap_pp_128x128x64 tmap_coop_128x256x64)
  foreach(model epi_tails_bf16 wgrad_tails_f16)
    ffn_gpu_forced_test(gpu_quads_${cfg}_${model} tests/gpu/models/${model}.ffn ${cfg} "1,7,64,130,1000")
  endforeach()
endforeach()
file(GLOB GPU_TEST_MODELS CONFIGURE_DEPENDS ${FFNC_TEST_DIR}/gpu/models/*.ffn)
foreach(m ${GPU_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${m})
  ffn_gpu_model_test(gpu_${base} ${rel})
endforeach()

# The rowwise kernels' second form (above 256 rows: several rows per block, emit_cuda.c "Rows in
# registers") with the last block's rows partly past M: 8 rows of a warp (rowwise_ops), 4 rows of
# 64 threads with the fp8 norm and the quantizer (f8_rowwise_wide).
foreach(base rowwise_ops f8_rowwise_wide)
  add_test(NAME gpu_rowwise_odd_rows_${base} COMMAND gpu_model_test tests/gpu/models/${base}.ffn)
  set_tests_properties(gpu_rowwise_odd_rows_${base} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TEST_TOKENS=257,1027,4099")
endforeach()

# NVRTC compiles every example's and GPU test model's generated source for sm_80 and sm_90 (no
# GPU needed), as the JIT does: the AOT package, one NVRTC program per kernel (runtime/units.c);
# and the examples' source whole, as `--emit cubin` shows it.
file(GLOB FFNC_EXAMPLE_MODELS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/examples/*.ffn)
# fp8 models (f8_*, and examples *_fp8 under `precision matmul f8...`) also for sm_89 (mma.sync
# with fp8 operands), and for sm_80 they must fail with the compile error that names the arch
# (exit 1), never fall back.
foreach(m ${FFNC_EXAMPLE_MODELS} ${GPU_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  set(archs sm_80 sm_90)
  if(base MATCHES "^f8_|_fp8$")
    set(archs sm_89 sm_90)
    add_test(NAME nvrtc_${base}_sm_80_refused
      COMMAND sh -c "out=$(\"$0\" build \"$1\" --emit cubin --arch sm_80 -o \"$2\" 2>&1); rc=$?; echo \"$out\"; \
test $rc -eq 1 && test ! -e \"$2\" && echo \"$out\" | grep -q 'fp8 matrix products need sm_89 or newer; the target is sm_80'"
              $<TARGET_FILE:ffnc> ${m} ${CMAKE_CURRENT_BINARY_DIR}/${base}_sm_80.cubin)
  endif()
  foreach(arch ${archs})
    add_test(NAME nvrtc_${base}_${arch}
      COMMAND ffnc build ${m} --arch ${arch} -o ${CMAKE_CURRENT_BINARY_DIR}/${base}_${arch}.ffnx)
    set_tests_properties(nvrtc_${base}_${arch} PROPERTIES LABELS nvrtc
      ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
  endforeach()
endforeach()
foreach(m ${FFNC_EXAMPLE_MODELS})
  get_filename_component(base ${m} NAME_WE)
  set(archs sm_80 sm_90)
  if(base MATCHES "^f8_|_fp8$")
    set(archs sm_89 sm_90)
  endif()
  foreach(arch ${archs})
    add_test(NAME nvrtc_whole_${base}_${arch}
      COMMAND ffnc build ${m} --emit cubin --arch ${arch} -o ${CMAKE_CURRENT_BINARY_DIR}/${base}_${arch}.cubin)
    set_tests_properties(nvrtc_whole_${base}_${arch} PROPERTIES LABELS nvrtc
      ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
  endforeach()
endforeach()

# The code size of the rowwise kernels a wide fp8 product needs (its A's quantizer, K = 28672):
# run as one block per row at decode, they fetch their code as they go (kernel_size_test.sh).
add_test(NAME nvrtc_code_size_f8_quant_wide
  COMMAND sh ${FFNC_TEST_DIR}/codegen/kernel_size_test.sh $<TARGET_FILE:ffnc> ${FFNC_TEST_DIR}/codegen/quant_wide.ffn
          sm_90 65536 ${CMAKE_CURRENT_BINARY_DIR}/quant_wide_sm_90.cubin)
set_tests_properties(nvrtc_code_size_f8_quant_wide PROPERTIES LABELS nvrtc
  ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")

# Every elementwise op of the op table (ir/ops.def), alone, on the GPU against the CPU
# reference: ewise_ops_model writes the model from the table and checks with the front end
# that it holds every such op (CPU); NVRTC compiles it (no GPU needed); gpu_ewise_ops_* run it.
add_executable(ewise_ops_model gpu/ewise_ops_model.c)
target_include_directories(ewise_ops_model PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(ewise_ops_model PRIVATE ffn)
foreach(type f32 bf16)
  set(model ${CMAKE_CURRENT_BINARY_DIR}/ewise_ops_${type}.ffn)
  add_test(NAME ewise_ops_model_${type} COMMAND ewise_ops_model ${type} ${model})
  set_tests_properties(ewise_ops_model_${type} PROPERTIES FIXTURES_SETUP ewise_ops_${type})
  add_test(NAME nvrtc_ewise_ops_${type}_sm_90
    COMMAND ffnc build ${model} --arch sm_90 -o ${CMAKE_CURRENT_BINARY_DIR}/ewise_ops_${type}_sm_90.ffnx)
  set_tests_properties(nvrtc_ewise_ops_${type}_sm_90 PROPERTIES LABELS nvrtc FIXTURES_REQUIRED ewise_ops_${type}
    ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
  add_test(NAME gpu_ewise_ops_${type} COMMAND gpu_model_test ${model})
  set_tests_properties(gpu_ewise_ops_${type} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}"
    FIXTURES_REQUIRED ewise_ops_${type})
endforeach()

# The host programs of examples/host: JIT and AOT (without NVRTC) agree.
add_test(NAME gpu_host_examples
  COMMAND sh ${FFNC_TEST_DIR}/gpu/host_examples_test.sh $<TARGET_FILE:ffnc> $<TARGET_FILE:jit_run>
          $<TARGET_FILE:aot_run> ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/host_examples)
set_tests_properties(gpu_host_examples PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# One model, several host threads and streams at once.
add_executable(gpu_threads_test gpu/gpu_threads_test.c)
target_include_directories(gpu_threads_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(gpu_threads_test PRIVATE ffn)
add_test(NAME gpu_threads COMMAND gpu_threads_test)
set_tests_properties(gpu_threads PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# The command line's GPU path against its CPU path.
add_test(NAME gpu_cli_run COMMAND sh ${FFNC_TEST_DIR}/gpu/cli_run_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/phi3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/cli_run)
set_tests_properties(gpu_cli_run PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# A call too large for device memory: FFN_ERR_OUT_OF_MEMORY with the sizes, nothing launched,
# and the model still right for the next call.
# The fp8 activation quantizer's codes and scales against the reference's, bit for bit, on rows
# built around the rounding boundaries of its fast path.
add_executable(gpu_f8_quant_test gpu/gpu_f8_quant_test.c)
target_include_directories(gpu_f8_quant_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(gpu_f8_quant_test PRIVATE ffn m)
add_test(NAME gpu_f8_quant COMMAND gpu_f8_quant_test)
set_tests_properties(gpu_f8_quant PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

add_executable(gpu_oom_test gpu/gpu_oom_test.c)
target_include_directories(gpu_oom_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(gpu_oom_test PRIVATE ffn)
add_test(NAME gpu_oom COMMAND gpu_oom_test)
set_tests_properties(gpu_oom PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# The weight-only kernels pick a tile of 8, 16, 32 or 64 tokens by M (kernels/gemm_host.h): the
# default token counts reach only 8 and 64, so each quantized model also runs at 2, 13, 16 and
# 29, and at 1 and 13 with split-K forced to 3 (chunks and splits that end inside a group).
foreach(m ${GPU_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  if(base MATCHES "^wq_")
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${m})
    ffn_gpu_env_test(gpu_${base}_mid_tiles ${rel} "FFNC_TEST_TOKENS=2,13,16,29")
    ffn_gpu_env_test(gpu_${base}_split3 ${rel} "FFNC_TEST_TOKENS=1,13;FFNC_GEMM_SPLITS=3")
    # prefill sizes: bf16 models on sm_90 run the mixed-input tile from 65 to 128 rows (plan.h:
    # KernelVariant.mx) and the bf16 products of dequantized weights beyond (.dq; on sm_80 from
    # 65 rows for i4, 160 for i8), the others and FFNC_WQ_DEQUANT=0 the quantized kernels; at the
    # edges of the regimes and past the 128-row tiles. FFNC_WQ_MIX=0: the dq mid tile in place of
    # the mixed one; split-K forced to 3: the mixed tile's producer from a k-tile inside K.
    ffn_gpu_env_test(gpu_${base}_prefill ${rel} "FFNC_TEST_TOKENS=64,65,100,128,129,160,300,513")
    ffn_gpu_env_test(gpu_${base}_no_dequant ${rel} "FFNC_TEST_TOKENS=160,1000;FFNC_WQ_DEQUANT=0")
    ffn_gpu_env_test(gpu_${base}_no_mix ${rel} "FFNC_TEST_TOKENS=65,128;FFNC_WQ_MIX=0")
    ffn_gpu_env_test(gpu_${base}_mix_split3 ${rel} "FFNC_TEST_TOKENS=100;FFNC_GEMM_SPLITS=3")
  endif()
endforeach()

# The i4 product with the codes as wgmma's register operand (tmar_128x128x64, kernels/gemm_wqrs.cuh:
# the rule at 129-512 rows) forced on the bf16 i4 models of whole 64-k groups, from one token (a
# 128-row tile of one row) to 1000 (eight tiles), and split-K 3 from a k-tile inside K and a group.
foreach(m ${GPU_TEST_MODELS})
  get_filename_component(base ${m} NAME_WE)
  if(base MATCHES "^wq_.*_i4g(64|128)_bf16$")
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${m})
    ffn_gpu_forced_test(gpu_${base}_rs ${rel} tmar_128x128x64 "1,7,64,65,128,130,1000" "7,130,1000")
  endif()
endforeach()

# Weight-only decode families forced on every test model whose name matches `pattern`, at 1-16
# tokens, with the rule's split-K and with 3.
function(ffn_gpu_wq_forced pattern)
  foreach(variant ${ARGN})
    foreach(m ${GPU_TEST_MODELS})
      get_filename_component(base ${m} NAME_WE)
      if(base MATCHES "${pattern}")
        file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${m})
        ffn_gpu_forced_test(gpu_${base}_${variant} ${rel} ${variant} "1,2,7,13,16" "1,2,7,13,16")
      endif()
    endforeach()
  endforeach()
endfunction()

# The i4 decode kernels the rule does not pick, forced by family name (e.g. wqd4v3_8 up to 8
# tokens, wqd4v3_16 up to 16): gemm_wqd (wqd4), gemm_wqdl's designs 3 and 4 (the rule's design
# 2 runs in the tests above) and design 2 with rings of 2 (wqd4v2t, up to 8 tokens: at 13 and 16
# the rule's), on every i4 model (g32 and f32 activations run gemm_wqd in
# gemm_wqdl's place), at 1-16 tokens, with the rule's split-K and with 3 splits (steps of 256 k:
# splits and chunks that end inside a group, and splits with no step at all for the small K).
ffn_gpu_wq_forced("^wq_.*_i4" wqd4 wqd4v3 wqd4v4 wqd4v2t)

# The i8 decode candidates on gemm_wqdl (design 2, steps of four 32-k tiles), forced by family
# name as above (wqd8v2_8 up to 8 tokens, wqd8v2_16 up to 16; wqd8v2n: 64-row CTAs, rings of 6),
# on every i8 model (f32 activations run gemm_wqd in gemm_wqdl's place), at 1-16 tokens, with the
# rule's split-K and with 3 (splits of whole 128-k steps: empty splits for K = 192-260, a last
# step with one tile of codes for K = 360).
ffn_gpu_wq_forced("^wq_.*_i8" wqd8v2 wqd8v2n)

# Tensor parallel: each rank's share of Llama-tiny (TP=2) compiles with NVRTC and its plan has
# one allreduce step per sublayer (4).
foreach(rank 0 1)
  add_test(NAME nvrtc_tp2_rank${rank}_llama3_tiny_sm_90
    COMMAND sh -c "\"$0\" build \"$1\" --tp 2 --tp-rank $2 --arch sm_90 -o \"$3\" && \
test $(\"$0\" build \"$1\" --tp 2 --tp-rank $2 --arch sm_90 --emit plan -o - | grep -c 'allreduce .* (sum over 2 ranks)') -eq 4"
            $<TARGET_FILE:ffnc> ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${rank}
            ${CMAKE_CURRENT_BINARY_DIR}/llama3_tiny_tp2_rank${rank}.ffnx)
  set_tests_properties(nvrtc_tp2_rank${rank}_llama3_tiny_sm_90 PROPERTIES LABELS nvrtc
    ENVIRONMENT "FFNC_CACHE_DIR=${PROJECT_BINARY_DIR}/test-kernel-cache")
endforeach()

# Tensor parallel on one GPU (label gpu): each rank's share holds about 1/N of the weight bytes
# after prepare; a share without its communicator, or with one of the wrong size, is refused.
add_executable(tp_model_test gpu/tp_model_test.c)
target_include_directories(tp_model_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(tp_model_test PRIVATE ffn)
add_test(NAME gpu_tp_model COMMAND tp_model_test)
set_tests_properties(gpu_tp_model PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# Calls in row blocks (runtime/tp_overlap.c) on one GPU (label gpu): whole programs cut into
# 3 blocks (FFNC_TP_BLOCKS) against the CPU reference, also a fused run and split-K 3 (each block
# its own tile counters); a blocked call against the same call whole, captured into a CUDA graph
# too, and where NCCL is found, a share's all-reduces on the side stream (a one-rank
# communicator: the identity) and captured (tp_overlap_gpu_test.c says what that cannot show).
foreach(model llama3_tiny gpt2_tiny)
  add_test(NAME gpu_${model}_rowblocks COMMAND gpu_model_test examples/${model}.ffn)
  set_tests_properties(gpu_${model}_rowblocks PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TP_BLOCKS=3")
endforeach()
add_test(NAME gpu_fused_llama_rowblocks_split3 COMMAND gpu_model_test tests/gpu/models/fused_llama.ffn)
set_tests_properties(gpu_fused_llama_rowblocks_split3 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77
  ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TP_BLOCKS=3;FFNC_GEMM_SPLITS=3")
add_executable(tp_overlap_gpu_test gpu/tp_overlap_gpu_test.c)
target_include_directories(tp_overlap_gpu_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(tp_overlap_gpu_test PRIVATE ffn)
add_test(NAME gpu_tp_overlap COMMAND sh -c ". \"$0\"; exec \"$1\"" ${FFNC_TEST_DIR}/gpu/nccl_env.sh
         $<TARGET_FILE:tp_overlap_gpu_test>)
set_tests_properties(gpu_tp_overlap PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# Tensor parallel over two GPUs (label gpu_multi: skipped, 77, with fewer than 2 GPUs or no
# NCCL; $FFNC_NCCL_LIBRARY, else libnccl.so.2, else PyTorch's wheel's): `ffnc run --tp 2
# --device gpu` against one GPU and the CPU reference at T = 1, 7, 64, 1000, 4096, for a Llama
# and a GPT example and a fused Llama run (FFN Fusion: one all-reduce).
function(ffn_gpu_multi_test name model)
  add_test(NAME ${name} COMMAND sh ${FFNC_TEST_DIR}/gpu/tp_run_test.sh $<TARGET_FILE:ffnc>
           ${PROJECT_SOURCE_DIR}/${model} ${CMAKE_CURRENT_BINARY_DIR}/${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu_multi SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")
endfunction()
set(gpu_multi_llama3_tiny examples/llama3_tiny.ffn)
set(gpu_multi_gpt2_tiny examples/gpt2_tiny.ffn)
set(gpu_multi_llama3_tiny_fused examples/llama3_tiny.ffn)
set(gpu_multi_llama3_tiny_fused_args --ffn-fusion 0..4)
set(gpu_multi_fused_gpt tests/gpu/models/fused_gpt.ffn)
ffn_gpu_multi_test(gpu_multi_tp2_llama3_tiny examples/llama3_tiny.ffn)
ffn_gpu_multi_test(gpu_multi_tp2_gpt2_tiny examples/gpt2_tiny.ffn)
ffn_gpu_multi_test(gpu_multi_tp2_llama3_tiny_fused examples/llama3_tiny.ffn --ffn-fusion 0..4)
ffn_gpu_multi_test(gpu_multi_tp2_fused_gpt tests/gpu/models/fused_gpt.ffn)
# the same with every call in 3 row blocks (from 64 rows), each block's all-reduce overlapped
# with the next blocks' kernels (runtime/tp_overlap.c); the policy alone cuts only T = 4096
foreach(name llama3_tiny gpt2_tiny llama3_tiny_fused fused_gpt)
  add_test(NAME gpu_multi_tp2_${name}_overlap3 COMMAND sh ${FFNC_TEST_DIR}/gpu/tp_run_test.sh $<TARGET_FILE:ffnc>
           ${PROJECT_SOURCE_DIR}/${gpu_multi_${name}} ${CMAKE_CURRENT_BINARY_DIR}/gpu_multi_tp2_${name}_overlap3
           ${gpu_multi_${name}_args})
  set_tests_properties(gpu_multi_tp2_${name}_overlap3 PROPERTIES LABELS gpu_multi SKIP_RETURN_CODE 77
    ENVIRONMENT "${FFNC_GPU_ENV};FFNC_TP_BLOCKS=3")
endforeach()
# ffnc bench --tp 2: the ranks checked against the whole program, the all-reduce alone
add_test(NAME gpu_multi_tp2_bench COMMAND sh ${FFNC_TEST_DIR}/gpu/tp_bench_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/gpu_multi_tp2_bench)
set_tests_properties(gpu_multi_tp2_bench PROPERTIES LABELS gpu_multi SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")
# The C API with the host program's own communicators (ncclGetUniqueId, ncclCommInitRank per
# rank on its thread, ffn_model_set_communicator): rank 0 against the whole program
add_executable(tp_api_test gpu/tp_api_test.c)
target_include_directories(tp_api_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(tp_api_test PRIVATE ffn)
add_test(NAME gpu_multi_tp2_api COMMAND sh -c ". \"$0\"; exec \"$1\"" ${FFNC_TEST_DIR}/gpu/nccl_env.sh
         $<TARGET_FILE:tp_api_test>)
set_tests_properties(gpu_multi_tp2_api PROPERTIES LABELS gpu_multi SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")

# Autotuning (runtime/tune.c): ffn_model_tune on a small model, a file per GEMM kernel in a
# fresh cache directory, a new model loading them, its runs (also with choices the rule never
# makes, FFNC_NO_TUNE=1 and a damaged file) against the CPU reference.
add_executable(gpu_tune_test gpu/gpu_tune_test.c)
target_include_directories(gpu_tune_test PRIVATE ${PROJECT_SOURCE_DIR} ${FFNC_TEST_DIR})
target_link_libraries(gpu_tune_test PRIVATE ffn)
foreach(m examples/llama3_tiny.ffn tests/gpu/models/wq_llama_i4g32_bf16.ffn)
  get_filename_component(base ${m} NAME_WE)
  add_test(NAME gpu_tune_${base} COMMAND gpu_tune_test ${m})
  set_tests_properties(gpu_tune_${base} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")
endforeach()
# ffnc tune --vs-cublaslt: every GEMM kernel beside cuBLASLt's plain GEMM of its shape.
add_test(NAME gpu_tune_vs_cublaslt COMMAND sh ${FFNC_TEST_DIR}/gpu/tune_vs_cublaslt_test.sh $<TARGET_FILE:ffnc>
         ${PROJECT_SOURCE_DIR}/examples/llama3_tiny.ffn ${CMAKE_CURRENT_BINARY_DIR}/tune_vs_cublaslt)
set_tests_properties(gpu_tune_vs_cublaslt PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 ENVIRONMENT "${FFNC_GPU_ENV}")
