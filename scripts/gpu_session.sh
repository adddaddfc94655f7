#!/bin/sh
# scripts/gpu_session.sh OUT [tests] [sanitize] [bench] [torch] [analyze32] [startup] [fp8acc] [lowp] [tp] [tp1] [tune] [tunewq] [gemmvs] [actepi] [epidec] [tunedec] [grad] [wqdl8] [pdl] [wide] [keep] [live] [dsplit] [splitab] [wqsplit] [bars] [wqdq] [dqab] [kern] ...
# What one call on the lent GPU machine runs, with a build made here and carried there (that
# machine has no flex, bison or jansson headers). The build has absolute paths under
# /work/main, so the copy is linked there first; the kernel cache in build/test-kernel-cache
# was filled here by NVRTC (`ctest -L nvrtc` and `ffnc bench --compile-only`), so nothing is
# compiled twice. Logs go to OUT.
set -u
out=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p /work "$out"
# the build travels stripped in .devcarry (the device tool's size limit), with libjansson
if [ ! -e "$here/build" ] && [ -d "$here/.devcarry/build" ]; then ln -sfn "$here/.devcarry/build" "$here/build"; fi
[ -d "$here/.devcarry/lib" ] && export LD_LIBRARY_PATH="$here/.devcarry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# the kernel cache travels compressed (cubins shrink about 15x)
[ -f "$here/.devcarry/cache.tar.xz" ] && tar xJf "$here/.devcarry/cache.tar.xz" -C "$here/.devcarry/build"
[ "$here" = /work/main ] || ln -sfn "$here" /work/main
cd /work/main/build || exit 1
export FFNC_CACHE_DIR=/work/main/build/test-kernel-cache FFNC_SOURCE_DIR=/work/main
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
# issue 15's rows: the keep step of the 8B and 70B sublayers beside torch's fwd+bwd, about 3 minutes
keep_step() {
  S=/work/main/bench/suite
  timeout 60 ./ffnc bench --grad --keep $S/llama3_8b_layer.ffn $S/llama3_70b_layer.ffn --tokens 1024,8192 --reps 10 \
    --json "$out/grad_bench.json" >"$out/grad_bench.txt" 2>&1
  echo "grad bench: exit $?"; grep -E "^ +[0-9]+ " "$out/grad_bench.txt"
  PYTHONUNBUFFERED=1 timeout 110 python3 /work/main/bench/torch_peer.py --grad --ffnc "$out/grad_bench.json" \
    --models llama3_8b_layer,llama3_70b_layer --tokens 1024,8192 --reps 10 >"$out/torch_grad.txt" 2>&1
  echo "torch grad peer: exit $?"; grep -E "^\|" "$out/torch_grad.txt"
}
for part in "$@"; do
  case $part in
  tests)
    # GPU_TESTS_RE: a subset (a call with little device time left), named in RESULTS.md when used
    timeout 300 ctest -L gpu -E gpu_diff_random -R "${GPU_TESTS_RE:-.}" --output-on-failure -j 8 >"$out/gpu_tests.log" 2>&1
    echo "gpu tests: exit $?"
    grep -E "tests passed|Failed|Skipped|Passed" "$out/gpu_tests.log" | tail -20
    grep -q "tests failed" "$out/gpu_tests.log" && ctest --rerun-failed --output-on-failure 2>&1 | grep -v "^ok " | tail -60
    ;;
  sanitize)
    for tool in memcheck racecheck; do
      for m in examples/llama3_tiny.ffn tests/gpu/models/rowwise_ops.ffn tests/gpu/models/wq_llama_i4g32_bf16.ffn; do
        name=$(basename "$m" .ffn)
        FFNC_TEST_TOKENS=1,7,130 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 \
          ./tests/gpu_model_test "$m" >"$out/${tool}_$name.log" 2>&1
        echo "compute-sanitizer $tool $name: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_$name.log" | tail -1))"
      done
      # a backward graph: the kernels of kernels/grad.cuh
      FFNC_TEST_TOKENS=1,7,130 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
        ./tests/gpu_model_test examples/gpt2_tiny.ffn --grad >"$out/${tool}_grad.log" 2>&1
      echo "compute-sanitizer $tool gpt2_tiny --grad: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_grad.log" | tail -1))"
    done
    ;;
  ab)
    # tile configurations A/B at mid token counts (FFNC_GEMM_VARIANT forces one)
    for v in default sm80_64x128x64 sm80_32x128x64; do
      if [ $v = default ]; then unset FFNC_GEMM_VARIANT; else export FFNC_GEMM_VARIANT=$v; fi
      timeout 100 ./ffnc bench /work/main/bench/suite/llama3_8b_layer.ffn --tokens 64,128,256,512 --no-graphs \
        --reps 20 >"$out/ab_$v.txt" 2>&1
      echo "== $v"; grep -E "^ +[0-9]+ +ffnc" "$out/ab_$v.txt"
    done
    unset FFNC_GEMM_VARIANT
    ;;
  debug)
    # whatever is being chased; kept short
    timeout 100 compute-sanitizer --tool memcheck ./tests/gpu_model_test tests/gpu/models/gpt_bf16.ffn >"$out/memcheck_gpt_bf16.log" 2>&1
    echo "memcheck gpt_bf16: exit $?"; grep -E "ERROR SUMMARY|Invalid|at .*in |FAIL|PASSED" "$out/memcheck_gpt_bf16.log" | head -20
    timeout 200 compute-sanitizer --tool memcheck --print-limit 5 ./ffnc bench /work/main/bench/suite/gpt_gelu_4096.ffn --tokens 1 --reps 2 --no-graphs --no-ceilings >"$out/memcheck_bench_gpt.log" 2>&1
    echo "memcheck bench gpt: exit $?"; grep -E "ERROR SUMMARY|Invalid|at .*in |error" "$out/memcheck_bench_gpt.log" | head -20
    ;;
  analyze32)
    # FFN Fusion analysis of the 32-layer Llama-3-8B stack (random weights, 64 calibration rows)
    timeout 150 python3 /work/main/scripts/gen_llama8b_32.py /tmp
    echo "weights for 32 layers (torch): exit $?"
    t0=$(date +%s.%N)
    timeout 180 ./ffnc analyze /work/main/examples/llama3_8b.ffn --weights /tmp/w32.safetensors \
      --input /tmp/c32.safetensors --json "$out/analyze32.json" >"$out/analyze32.txt" 2>&1
    echo "analyze 32 layers: exit $?, $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
    tail -12 "$out/analyze32.txt"
    rm -f /tmp/w32.safetensors
    ;;
  torch)
    # the torch peer (eager, CUDA graph, torch.compile + graph) against the bench run just before
    PYTHONUNBUFFERED=1 timeout 330 python3 /work/main/bench/torch_peer.py --ffnc "$out/bench.json" \
      --json "$out/torch.json" >"$out/torch.txt" 2>&1
    echo "torch peer: exit $?"
    tail -40 "$out/torch.txt"
    ;;
  mid)
    # mid-size calls (the 128 x 224 tile): ffnc alone, the torch numbers come from a torch run
    timeout 200 ./ffnc bench /work/main/bench/suite/llama3_8b_layer.ffn /work/main/bench/suite/llama3_70b_layer.ffn \
      /work/main/bench/suite/llama3_8b_4layers.ffn /work/main/bench/suite/gpt_gelu_4096.ffn --tokens 128,256,512 \
      --json "$out/mid.json" >"$out/mid.txt" 2>&1
    echo "mid bench: exit $?"; grep -E "suite|  ffnc" "$out/mid.txt"
    ;;
  torchmid)
    # torch at the mid sizes, beside the mid part's ffnc numbers (run mid first, same call)
    PYTHONUNBUFFERED=1 timeout 150 python3 /work/main/bench/torch_peer.py --ffnc "$out/mid.json" --tokens 128,256,512 \
      --models llama3_8b_layer,llama3_70b_layer,llama3_8b_4layers.ffn,gpt_gelu >"$out/torchmid.txt" 2>&1
    echo "torch mid: exit $?"; grep -E "T=|^\|" "$out/torchmid.txt"
    ;;
  diff)
    # random programs on the GPU against the reference, in batches of 25 seeds for at most ~4 minutes
    t0=$(date +%s) s=1
    while [ $(($(date +%s) - t0)) -lt 240 ]; do
      timeout 90 ./tests/ffn_diffgen --mode gpu --count 25 --seed $s --tokens 1,7,64,300 >"$out/diff_$s.log" 2>&1
      echo "diff seeds $s..$((s + 24)): exit $? $(tail -n 1 "$out/diff_$s.log")"
      s=$((s + 25))
    done
    grep -h "^FAIL seed" "$out"/diff_*.log | head -20
    ;;
  diffpar)
    # 1,000 random programs (seeds 1-1000): 10 workers of two JIT threads each (16 cores; one
    # thread each was slower: 2 batches of 25 in 130 s) taking batches of 25 seeds in turn until
    # the seeds or DIFF_DEADLINE seconds (300) run out; about 7 minutes for all 1,000
    t0=$(date +%s)
    for w in $(seq 0 9); do
      (b=$w
      while [ $b -lt 40 ] && [ $(($(date +%s) - t0)) -lt "${DIFF_DEADLINE:-300}" ]; do
        s=$((b * 25 + 1))
        FFNC_JIT_THREADS=2 timeout 150 ./tests/ffn_diffgen --mode gpu --count 25 --seed $s --tokens 1,7,64,300 \
          >"$out/diff_$s.log" 2>&1
        echo "diff seeds $s..$((s + 24)): exit $? $(tail -n 1 "$out/diff_$s.log")" >>"$out/diff_summary.txt"
        b=$((b + 10))
      done) &
    done
    wait
    sort -t' ' -k3 -n "$out/diff_summary.txt"
    echo "programs run: $(cat "$out"/diff_*.log | grep -c '^seed [0-9]*: ')," \
      "passed $(cat "$out"/diff_*.log | grep -c '^seed [0-9]*: passed')," \
      "skipped $(cat "$out"/diff_*.log | grep -c '^seed [0-9]*: skipped')"
    grep -h "^FAIL seed" "$out"/diff_*.log | head -30
    ;;
  wq)
    # weight-only int8/int4 at decode sizes, and the split-K choice against forced splits
    S=/work/main/bench/suite
    timeout 150 ./ffnc bench $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i8.ffn \
      $S/llama3_70b_layer_i8.ffn --tokens 1,16,64,1024 --reps 20 --no-ceilings --json "$out/wq.json" >"$out/wq.txt" 2>&1
    echo "wq bench: exit $?"; grep -E "suite|  ffnc" "$out/wq.txt"
    for sp in 1 2 4 8; do
      FFNC_GEMM_SPLITS=$sp timeout 60 ./ffnc bench $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i4g128.ffn \
        --tokens 1 --reps 20 --no-ceilings >"$out/wq_split$sp.txt" 2>&1
      echo "== splits $sp: exit $?"; grep -E "  ffnc" "$out/wq_split$sp.txt"
    done
    ;;
  wqdl8)
    # int8 decode on gemm_wqdl (kernels/NOTES.md, "int8 decode on gemm_wqdl"): every weight-only
    # GPU test (the i8 candidates forced, and i4, whose template gained the code width), the
    # sanitizers on the candidates, then the rule (wq8_8 / wqd8_16) against the two candidate
    # families at 1 and 16 tokens, one process each in this one call
    timeout 300 ctest -L gpu -R 'gpu_wq_' --output-on-failure -j 4 >"$out/wqdl8_tests.log" 2>&1
    echo "wq tests: exit $?"; grep -E "tests passed|tests failed|\*\*\*Failed|Exception" "$out/wqdl8_tests.log" | tail -20
    for v in wqd8v2 wqd8v2n; do
      for tool in memcheck racecheck; do
        FFNC_GEMM_VARIANT=$v FFNC_TEST_TOKENS=1,13 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 \
          ./tests/gpu_model_test tests/gpu/models/wq_oddk_i8_bf16.ffn >"$out/${tool}_$v.log" 2>&1
        echo "compute-sanitizer $tool $v: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_$v.log" | tail -1))"
      done
    done
    S=/work/main/bench/suite
    for v in default wqd8v2 wqd8v2n; do
      if [ $v = default ]; then unset FFNC_GEMM_VARIANT; else export FFNC_GEMM_VARIANT=$v; fi
      timeout 120 ./ffnc bench $S/llama3_70b_layer_i8.ffn $S/llama3_8b_layer_i8.ffn --tokens 1,16 --reps 20 \
        --no-ceilings --json "$out/wqdl8_$v.json" >"$out/wqdl8_$v.txt" 2>&1
      echo "== $v: exit $?"; grep -E "suite|  ffnc" "$out/wqdl8_$v.txt"
    done
    unset FFNC_GEMM_VARIANT
    ;;
  startup)
    # cold (empty cache) and warm JIT start-up of the Llama-3-8B example on this machine's cores
    timeout 60 sh /work/main/bench/startup.sh /work/main/build/ffnc /work/main/examples/llama3_8b.ffn sm_90 3 \
      >"$out/startup.txt" 2>&1
    echo "startup: exit $?"; cat "$out/startup.txt"
    ;;
  fp8acc)
    # what fp8 costs in accuracy: ffnc analyze on the GPU beside torch's per-tensor and row-wise fp8
    timeout 200 sh /work/main/bench/gpu_fp8_accuracy.sh /work/main/build/ffnc /tmp/fp8acc >"$out/fp8acc.txt" 2>&1
    echo "fp8 accuracy: exit $?"; cat "$out/fp8acc.txt"
    ;;
  lowp)
    # low precision beside bf16, and torch's fp8 (torch._scaled_mm, row-wise) on the same shapes
    S=/work/main/bench/suite
    timeout 300 ./ffnc bench $S/llama3_8b_layer_f8.ffn $S/llama3_70b_layer_f8.ffn $S/llama3_8b_layer.ffn \
      $S/llama3_70b_layer.ffn --tokens 1,16,128,1024,8192 --reps 20 --json "$out/lowp.json" >"$out/lowp.txt" 2>&1
    echo "lowp bench: exit $?"; grep -E "suite|ceilings|  ffnc" "$out/lowp.txt"
    timeout 120 ./ffnc bench $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i8.ffn \
      $S/llama3_70b_layer_i8.ffn --tokens 1,16,128 --reps 10 --no-graphs >"$out/int.txt" 2>&1
    echo "int bench: exit $?"; grep -E "suite|  ffnc" "$out/int.txt"
    PYTHONUNBUFFERED=1 timeout 200 python3 /work/main/bench/torch_peer.py --ffnc "$out/lowp.json" \
      --models llama3_8b_layer,llama3_70b_layer --reps 20 >"$out/torch_lowp.txt" 2>&1
    echo "torch lowp: exit $?"; grep -E "^\|" "$out/torch_lowp.txt"
    ;;
  tp)
    # tensor parallel over two GPUs (a 2-GPU machine; NCCL from PyTorch's wheel where none is
    # installed): the gpu_multi tests, the one-GPU TP checks, and the bench of the 8B and 70B
    # sublayers and the fused 4-layer stack over 2 ranks, with NCCL's all-reduce alone
    . /work/main/tests/gpu/nccl_env.sh # also NCCL_NVLS_ENABLE=0: no NVLink multicast there
    echo "NCCL: ${FFNC_NCCL_LIBRARY:-libnccl.so.2 from the loader's path}; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
    timeout 300 ctest -R "gpu_multi|gpu_tp_model|gpu_tp_overlap" --output-on-failure >"$out/tp_tests.log" 2>&1
    echo "tp tests: exit $?"; grep -E "tests passed|Failed|Skipped|Passed|SKIP" "$out/tp_tests.log" | tail -16
    # tp_us (row blocks, all-reduces overlapped: runtime/tp_overlap.c) beside serial_us (whole)
    S=/work/main/bench/suite
    timeout 400 ./ffnc bench $S/llama3_8b_layer.ffn $S/llama3_70b_layer.ffn $S/llama3_8b_4layers.ffn \
      $S/llama3_8b_4layers_fused.ffn --tp 2 --tokens 1,16,128,1024,2048,4096,8192 --reps 20 >"$out/tp_bench.txt" 2>&1
    echo "tp bench: exit $?"; cat "$out/tp_bench.txt"
    ;;
  tp1)
    # the tensor-parallel paths one GPU can run: calls in row blocks (also captured), a share's
    # all-reduces on the side stream through a one-rank communicator, the weight windows
    . /work/main/tests/gpu/nccl_env.sh
    timeout 200 ctest -R "gpu_tp_overlap|rowblocks|gpu_tp_model" --output-on-failure >"$out/tp1_tests.log" 2>&1
    echo "tp1 tests: exit $?"; grep -E "tests passed|Failed|Skipped|Passed|SKIP|^ok|FAIL|blocks" "$out/tp1_tests.log" | tail -40
    ;;
  tune)
    # autotuning: ffnc tune of the Llama-3-8B sublayer and the GPT GELU FFN at the suite's token
    # counts (the choices saved in the kernel cache), then the bench of both with the tuned
    # choices and without them (FFNC_NO_TUNE=1: the built-in row-count rule)
    S=/work/main/bench/suite
    for m in llama3_8b_layer gpt_gelu_4096; do
      timeout 120 ./ffnc tune $S/$m.ffn --tokens 1,16,128,1024,8192 -v >"$out/tune_$m.txt" 2>"$out/tune_$m.err"
      echo "tune $m: exit $?"; grep -E "^tune:|error" "$out/tune_$m.err"; tail -1 "$out/tune_$m.txt"
    done
    for t in tuned untuned; do
      if [ $t = tuned ]; then unset FFNC_NO_TUNE; else export FFNC_NO_TUNE=1; fi
      timeout 150 ./ffnc bench $S/llama3_8b_layer.ffn $S/gpt_gelu_4096.ffn --tokens 1,16,128,1024,8192 --reps 20 \
        --json "$out/tune_bench_$t.json" >"$out/tune_bench_$t.txt" 2>&1
      echo "== bench $t: exit $?"; grep -E "suite|tuned GEMM|ceilings|  ffnc" "$out/tune_bench_$t.txt"
    done
    unset FFNC_NO_TUNE
    ;;
  tunewq)
    # the weight-only decode's configurations and splits on this card: ffnc tune of the 70B and 8B
    # int4 g128 and the 70B int8 sublayers at 1 and 16 tokens (every variant, every split that
    # fits), then the bench with the tuned choices and without them (FFNC_NO_TUNE=1), about 3 minutes
    S=/work/main/bench/suite
    for m in llama3_70b_layer_i4g128 llama3_8b_layer_i4g128 llama3_70b_layer_i8; do
      timeout 100 ./ffnc tune $S/$m.ffn --tokens 1,16 -v >"$out/tunewq_$m.txt" 2>"$out/tunewq_$m.err"
      echo "tune $m: exit $?"; grep -E "^tune:|error" "$out/tunewq_$m.err" | head -12
    done
    for t in tuned untuned; do
      if [ $t = tuned ]; then unset FFNC_NO_TUNE; else export FFNC_NO_TUNE=1; fi
      timeout 60 ./ffnc bench $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i8.ffn \
        --tokens 1,16 --reps 20 --no-graphs --no-ceilings >"$out/tunewq_bench_$t.txt" 2>&1
      echo "== bench $t: exit $?"; grep -E "suite|tuned GEMM|  ffnc" "$out/tunewq_bench_$t.txt"
    done
    unset FFNC_NO_TUNE
    ;;
  gemmvs)
    # issue 10's "gate/up GEMM alone against cuBLASLt's plain GEMM": ffnc tune --vs-cublaslt of the
    # 8B, 70B and GPT sublayers at 128, 1024 and 8192 tokens: each GEMM kernel alone (the rule's
    # choice and the tuned one) beside cuBLASLt's plain GEMM of its M, N, K, both timed one launch
    # after an L2 flush (~1 minute). It saves tuned choices: run it last, or FFNC_NO_TUNE=1 after.
    S=/work/main/bench/suite
    for m in llama3_8b_layer llama3_70b_layer gpt_gelu_4096; do
      timeout 150 ./ffnc tune $S/$m.ffn --tokens 128,1024,8192 --vs-cublaslt >"$out/gemmvs_$m.txt" 2>"$out/gemmvs_$m.err"
      echo "gemmvs $m: exit $?"; grep -E "error" "$out/gemmvs_$m.err" | head -5; sed -n '/^vs cuBLASLt/,$p' "$out/gemmvs_$m.txt"
    done
    ;;
  actepi)
    # the activation epilogues' code size (kernels/opmath.cuh OPM_SIG): each GEMM kernel alone
    # beside cuBLASLt (ffnc tune --vs-cublaslt) with this build (`new`), .devcarry/ffnc_alt (`old`)
    # and, where carried, .devcarry/ffnc_alt2 (`alt`; scripts/ab_builds.sh makes both): the 8B, GPT
    # and silu-probe products at 1024 and 8192 rows, then each build's bench of the 8B and GPT
    # sublayers (untuned). Own cache directories: no tuned choice reaches the other parts (~4 min).
    S=/work/main/bench/suite P=/work/main/bench/probe D=/work/main/.devcarry
    builds="new old"; [ -x $D/ffnc_alt2 ] && builds="new old alt"
    # ACTEPI_SHORT=1 (a call with little device time left): no silu probe, one bench round
    models="$S/llama3_8b_layer $S/gpt_gelu_4096 $P/plain_14336x4096_silu" rounds="$builds $builds"
    [ "${ACTEPI_SHORT:-0}" = 1 ] && models="$S/llama3_8b_layer $S/gpt_gelu_4096" rounds=$builds
    [ "${ACTEPI_SHORT:-0}" = 2 ] && models="$S/gpt_gelu_4096" rounds=$builds # the GPT alone
    for m in $models; do
      for b in $builds; do
        bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt; [ $b = alt ] && bin=$D/ffnc_alt2
        FFNC_CACHE_DIR=/tmp/actepi_$b timeout 100 $bin tune $m.ffn --tokens 1024,8192 --vs-cublaslt >"$out/actepi_${b}_${m##*/}.txt" 2>&1
        echo "== $b ${m##*/}: exit $?"; grep -E "^  k[0-9]|^ +[0-9]+ |^k[0-9]" "$out/actepi_${b}_${m##*/}.txt"
      done
    done
    for b in $rounds; do
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt; [ $b = alt ] && bin=$D/ffnc_alt2
      sub="$S/llama3_8b_layer.ffn $S/gpt_gelu_4096.ffn"; [ "${ACTEPI_SHORT:-0}" = 2 ] && sub=$S/gpt_gelu_4096.ffn
      FFNC_CACHE_DIR=/tmp/actepi_$b FFNC_NO_TUNE=1 timeout 120 $bin bench $sub \
        --tokens 1024,8192 --reps 10 --no-ceilings --no-graphs >"$out/actepi_bench_$b.txt" 2>&1
      echo "== bench $b: exit $?"; grep -E "suite|  ffnc" "$out/actepi_bench_$b.txt"
    done
    ;;
  epidec)
    # the other side of actepi's A/B: the 8B and GPT sublayers at 1, 16 and 128 tokens with each
    # carried build (untuned, no graphs, us, two alternating rounds, ~1.5 minutes): an epilogue
    # change made for the large products must not cost the decode rows
    S=/work/main/bench/suite D=/work/main/.devcarry
    builds="new old"; [ -x $D/ffnc_alt2 ] && builds="new old alt"
    for r in 1 2; do for b in $builds; do
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt; [ $b = alt ] && bin=$D/ffnc_alt2
      FFNC_CACHE_DIR=/tmp/epidec_$b FFNC_NO_TUNE=1 timeout 60 $bin bench $S/llama3_8b_layer.ffn $S/gpt_gelu_4096.ffn \
        --tokens 1,16,128 --reps 20 --no-graphs --no-ceilings >"$out/epidec_$b$r.txt" 2>&1
      echo "== $b $r: exit $?"
      awk '/ \(/ && /\.ffn/ {printf "\n %s:", $1} / ffnc +no/ {printf " %s %s;", $1, $4}' "$out/epidec_$b$r.txt"; echo
    done; done
    ;;
  mxq)
    # a first look at the mixed-input tiles: new and old on the 8B int4 at 128, 512 and 1024 tokens
    # (untuned, no graphs, us, one round each; ~1 minute)
    S=/work/main/bench/suite D=/work/main/.devcarry
    for b in new old; do
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt
      FFNC_NO_TUNE=1 timeout 100 $bin bench $S/llama3_8b_layer_i4g128.ffn --tokens 128,256,512,1024 \
        --reps 10 --no-graphs --no-ceilings >"$out/mxq_$b.txt" 2>&1
      echo "== $b: exit $?"; awk '/ ffnc +no/ {printf " %s %s %s;", $1, $4, $NF}' "$out/mxq_$b.txt"; echo
    done
    ;;
  mxncu)
    # where the mixed-input tiles' time goes: ncu on the 8B int4's tmaq launches at 128 and 1024
    # tokens (time, tensor pipe, issue slots, shared-store bank conflicts; then the stall reasons)
    S=/work/main/bench/suite
    for t in 128 1024; do
      FFNC_CACHE_DIR=/tmp/dqab_new FFNC_NO_TUNE=1 timeout 60 ncu --kernel-name regex:tmaq --launch-count 2 \
        --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
        ./ffnc bench $S/llama3_8b_layer_i4g128.ffn --tokens $t --reps 1 --no-graphs --no-ceilings >"$out/mxncu_$t.txt" 2>&1
      echo "== ncu $t: exit $?"; grep -E "^  [a-z][a-z_0-9]+\(|duration|hmma|issued|throughput|conflicts" "$out/mxncu_$t.txt" | cut -c1-100
    done
    FFNC_CACHE_DIR=/tmp/dqab_new FFNC_NO_TUNE=1 timeout 60 ncu --kernel-name regex:tmaq --launch-count 1 \
      --metrics smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct \
      ./ffnc bench $S/llama3_8b_layer_i4g128.ffn --tokens 128 --reps 1 --no-graphs --no-ceilings >"$out/mxncu_stall.txt" 2>&1
    echo "== ncu stalls: exit $?"; grep -E "stalled" "$out/mxncu_stall.txt" | cut -c1-100
    ;;
  dqab)
    # the quantized prefill's A/B (the mixed-input tile, pending/dqpipe.patch and what follows): each
    # carried build (new, old, alt as scripts/ab_builds.sh made them) on the 8B int4/int8 and 70B
    # int4 sublayers at 128, 512 and 1024 tokens (untuned, no graphs, us, two alternating rounds),
    # then ncu's time and DRAM share of the 8B int4's first four launches at 128 tokens that are
    # dequantizations or TMA GEMMs, per build (~4 minutes)
    S=/work/main/bench/suite D=/work/main/.devcarry
    builds="new old"; [ -x $D/ffnc_alt2 ] && builds="new old alt"
    for r in 1 2; do for b in $builds; do
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt; [ $b = alt ] && bin=$D/ffnc_alt2
      FFNC_CACHE_DIR=/tmp/dqab_$b FFNC_NO_TUNE=1 timeout 150 $bin bench $S/llama3_8b_layer_i4g128.ffn \
        $S/llama3_8b_layer_i8.ffn $S/llama3_70b_layer_i4g128.ffn --tokens 128,512,1024 --reps 10 --no-graphs \
        --no-ceilings >"$out/dqab_$b$r.txt" 2>&1
      echo "== $b $r: exit $?"
      awk '/ \(/ && /\.ffn/ {printf "\n %s:", $1} / ffnc +no/ {printf " %s %s %s;", $1, $4, $NF}' "$out/dqab_$b$r.txt"; echo
    done; done
    for b in new old; do # the largest prefill, once
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt
      FFNC_CACHE_DIR=/tmp/dqab_$b FFNC_NO_TUNE=1 timeout 60 $bin bench $S/llama3_8b_layer_i4g128.ffn --tokens 8192 \
        --reps 5 --no-graphs --no-ceilings >"$out/dqab_${b}8k.txt" 2>&1
      echo "== $b 8192: exit $?"; awk '/ ffnc +no/ {printf " %s %s %s;", $1, $4, $NF}' "$out/dqab_${b}8k.txt"; echo
    done
    for b in $builds; do
      bin=./ffnc; [ $b = old ] && bin=$D/ffnc_alt; [ $b = alt ] && bin=$D/ffnc_alt2
      FFNC_CACHE_DIR=/tmp/dqab_$b FFNC_NO_TUNE=1 timeout 60 ncu --kernel-name regex:"ffn_wq_dequant|tma" --launch-count 4 \
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
        $bin bench $S/llama3_8b_layer_i4g128.ffn --tokens 128 --reps 1 --no-graphs --no-ceilings >"$out/dqab_ncu_$b.txt" 2>&1
      echo "== ncu $b: exit $?"; grep -E "^  [a-z][a-z_0-9]+\(|duration|throughput|registers|warps_active" "$out/dqab_ncu_$b.txt" | cut -c1-90
    done
    ;;
  tunedec)
    # the 16-bit and fp8 decode's configurations and splits on this card: ffnc tune of the 8B bf16
    # and the 70B / 8B fp8 sublayers at one token, then the bench tuned and untuned (~2 minutes)
    S=/work/main/bench/suite
    for m in llama3_8b_layer llama3_70b_layer_f8 llama3_8b_layer_f8; do
      timeout 100 ./ffnc tune $S/$m.ffn --tokens 1 -v >"$out/tunedec_$m.txt" 2>"$out/tunedec_$m.err"
      echo "tune $m: exit $?"; grep -E "^tune:|error" "$out/tunedec_$m.err" | head -12
    done
    for t in tuned untuned; do
      if [ $t = tuned ]; then unset FFNC_NO_TUNE; else export FFNC_NO_TUNE=1; fi
      timeout 60 ./ffnc bench $S/llama3_8b_layer.ffn $S/llama3_70b_layer_f8.ffn $S/llama3_8b_layer_f8.ffn \
        --tokens 1 --reps 20 --no-ceilings >"$out/tunedec_bench_$t.txt" 2>&1
      echo "== bench $t: exit $?"; grep -E "suite|tuned GEMM|  ffnc" "$out/tunedec_bench_$t.txt"
    done
    unset FFNC_NO_TUNE
    ;;
  grad)
    # training (issue 15), about 7 minutes at most: every GPU test of training (the C API's, keep,
    # the direct weight gradients against the staged ones, the Python bridge's loss curves), the
    # sanitizers on the direct wgrad, then fwd+bwd of the Llama-3-8B and -70B sublayers at 1024 and
    # 8192 tokens with the keep policy (and the 8B one with FFNC_GRAD_DIRECT=0 and with recompute,
    # for A/B) beside torch eager and torch.compile, each with its peak extra memory. No kernel cache
    # needs carrying: the GPU machine's 16 cores compile these in seconds.
    timeout 150 ctest -R "gpu_grad|gpu_wgrad|gpu_python_train" -j 8 --output-on-failure >"$out/grad_tests.log" 2>&1
    echo "grad tests: exit $?"; grep -E "tests passed|tests failed" "$out/grad_tests.log"
    grep -q "tests failed" "$out/grad_tests.log" && grep -E "FAIL|Error|assert|seed" "$out/grad_tests.log" | head -40
    for tool in memcheck racecheck; do
      FFNC_TEST_TOKENS=7,130 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 ./tests/grad_api_test \
        /work/main/tests/gpu/models/wgrad_tails_bf16.ffn --direct 3 >"$out/${tool}_direct.log" 2>&1
      echo "compute-sanitizer $tool direct wgrad: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_direct.log" | tail -1))"
    done
    S=/work/main/bench/suite
    timeout 100 ./ffnc bench --grad --keep $S/llama3_8b_layer.ffn $S/llama3_70b_layer.ffn --tokens 1024,8192 --reps 10 \
      --json "$out/grad_bench.json" >"$out/grad_bench.txt" 2>&1
    echo "grad bench (keep): exit $?"; cat "$out/grad_bench.txt"
    FFNC_GRAD_DIRECT=0 timeout 40 ./ffnc bench --grad --keep $S/llama3_8b_layer.ffn --tokens 1024,8192 --reps 10 \
      --no-ceilings >"$out/grad_bench_staged.txt" 2>&1
    echo "grad bench (keep, staged): exit $?"; grep -E "^ +[0-9]+ " "$out/grad_bench_staged.txt"
    timeout 60 ./ffnc bench --grad $S/llama3_8b_layer.ffn --tokens 1024,8192 --reps 10 --no-ceilings \
      >"$out/grad_bench_recompute.txt" 2>&1
    echo "grad bench (recompute): exit $?"; grep -E "^ +[0-9]+ " "$out/grad_bench_recompute.txt"
    PYTHONUNBUFFERED=1 timeout 200 python3 /work/main/bench/torch_peer.py --grad --ffnc "$out/grad_bench.json" \
      --models llama3_8b_layer,llama3_70b_layer --tokens 1024,8192 --reps 10 --json "$out/torch_grad.json" \
      >"$out/torch_grad.txt" 2>&1
    echo "torch grad peer: exit $?"; grep -E "^\|" "$out/torch_grad.txt"; tail -3 "$out/torch_grad.txt"
    ;;
  pdl)
    # programmatic dependent launch (on by default) against FFNC_PDL=0, alternately, in one process
    # each: the decode rows it was measured on and the prefill rows it was not (kernels/NOTES.md,
    # "Fourteenth session")
    s=/work/main/bench/suite
    for v in on off on off; do
      if [ $v = off ]; then export FFNC_PDL=0; else unset FFNC_PDL; fi
      timeout 100 ./ffnc bench $s/llama3_8b_4layers.ffn $s/llama3_8b_layer.ffn $s/llama3_8b_layer_i4g128.ffn \
        $s/gpt_gelu_4096.ffn $s/llama3_70b_layer.ffn --tokens 1,16,1024,8192 --no-ceilings --reps 10 >>"$out/pdl_$v.txt" 2>&1
      echo "pdl $v: exit $?"
    done
    unset FFNC_PDL
    grep -E "^/|^ +[0-9]+ +ffnc" "$out/pdl_on.txt" | head -40
    ;;
  wide)
    # the cooperative 128 x 256 tile above 512 rows (kernels/gemm_host.h: ffn_gemm_prefer_wide;
    # kernels/NOTES.md, "Eighteenth session"), about 6 minutes: the grad GPU tests under the rule on
    # this card, the keep step beside torch, then the forward's tiles under ncu with the card's own
    # clocks (--clock-control none: the power limit is part of the question) for the 8B and 70B
    # gate/up and down products at 8192 tokens, ping-pong against cooperative: clock, DRAM and L2
    # throughput, tensor pipe activity
    nvidia-smi --query-gpu=name,clocks.max.memory --format=csv,noheader
    timeout 150 ctest -L gpu -R "grad|keep|train|wgrad" -j 8 --output-on-failure >"$out/grad_tests.log" 2>&1
    echo "grad tests: exit $?"; grep -E "tests passed|tests failed" "$out/grad_tests.log"
    keep_step
    S=/work/main/bench/suite
    if command -v ncu >/dev/null; then
      for v in tmap_pp_128x128x64 tmap_coop_128x256x64; do
        for m in llama3_8b_layer llama3_70b_layer; do
          FFNC_GEMM_VARIANT=$v timeout 90 ncu --clock-control none -k regex:tmap --launch-skip 6 --launch-count 2 \
            --section SpeedOfLight --metrics gpc__cycles_elapsed.avg.per_second,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
            ./ffnc bench $S/$m.ffn --tokens 8192 --reps 3 --no-graphs --no-ceilings >"$out/ncu_${m}_$v.txt" 2>&1
          echo "ncu $m $v: exit $?"
          grep -E "tmap|Duration|Elapsed Cycles|cycles_elapsed.avg.per_second|DRAM Throughput|dram__bytes|hit_rate|Compute \(SM\)" \
            "$out/ncu_${m}_$v.txt" | head -24
        done
      done
    fi
    ;;
  keep)
    keep_step
    ;;
  live)
    # wq_finish storing and reducing only the tile's rows that hold tokens, about 3 minutes: the
    # weight-only GPU tests, then the decode against the previous build (.devcarry/ffnc_base, a
    # stripped ffnc of the parent commit), alternating
    timeout 240 ctest -L gpu -R "wq" -j 8 --output-on-failure >"$out/wq_tests.log" 2>&1
    echo "wq gpu tests: exit $?"; grep -E "tests passed|tests failed|\(Failed\)" "$out/wq_tests.log" | head -20
    S=/work/main/bench/suite
    for r in 1 2; do for b in base live; do
      bin=./ffnc; [ $b = base ] && bin=/work/main/.devcarry/ffnc_base
      timeout 60 $bin bench $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i8.ffn \
        $S/llama3_8b_layer_i8.ffn --tokens 1,8,16 --reps 20 --no-graphs --no-ceilings >"$out/live_$b$r.txt" 2>&1
      echo "== $b $r: exit $?"; grep -E "  ffnc" "$out/live_$b$r.txt" | awk '{print $1, $4}' | tr '\n' ';'; echo
    done; done
    ;;
  dsplit)
    # the decode products' split-K (kernels/gemm_host.h: ffn_gemm_pick_splits), about 3 minutes:
    # each mma.sync product of the 70B fp8 / bf16 and 8B fp8 sublayers at one token under ncu
    # (--clock-control none), with the rule's split and with FFNC_GEMM_SPLITS forced (which sets
    # both products' split: ncu separates them); the median of each kernel's launches, us
    # (DSPLIT_MODELS, DSPLIT_SPLITS: fewer of either)
    S=/work/main/bench/suite
    if command -v ncu >/dev/null; then
      for m in ${DSPLIT_MODELS:-llama3_70b_layer_f8 llama3_70b_layer llama3_8b_layer_f8}; do
        for sp in ${DSPLIT_SPLITS:-rule 1 2 3 4 6 8}; do
          if [ $sp = rule ]; then unset FFNC_GEMM_SPLITS; else export FFNC_GEMM_SPLITS=$sp; fi
          timeout 40 ncu --clock-control none -k regex:'^k[0-9]+_sm80' --metrics gpu__time_duration.sum \
            ./ffnc bench $S/$m.ffn --tokens 1 --reps 5 --no-graphs --no-ceilings >"$out/dsplit_${m}_$sp.txt" 2>&1
          printf '%s splits %s (exit %s):' $m $sp $?
          awk '/^  k[0-9]+_sm80/ {k = $1 "@" $2 $3 substr($4, 1, index($4, "x") - 1)} /gpu__time_duration.sum/ {print k, $2, $3}' "$out/dsplit_${m}_$sp.txt" |
            sort -k1,1 -k3,3n | awk '{a[$1] = a[$1] " " $3; u[$1] = $2; n[$1]++}
              END {for (k in a) {split(a[k], v, " "); printf " %s %s %s (%d)", k, v[int((n[k] + 1) / 2)], u[k], n[k]}}'
          echo
        done
      done
      unset FFNC_GEMM_SPLITS
    fi
    ;;
  splitab)
    # the decode products' split rule (kernels/gemm_host.h: ffn_gemm_pick_splits) against an
    # alternative built here (.devcarry/ffnc_alt, stripped), in alternating rounds, graphs, us
    S=/work/main/bench/suite
    for r in 1 2; do for b in base alt; do
      bin=./ffnc; [ $b = alt ] && bin=/work/main/.devcarry/ffnc_alt
      timeout 60 $bin bench $S/llama3_70b_layer_f8.ffn $S/llama3_70b_layer.ffn $S/llama3_8b_layer_f8.ffn \
        $S/llama3_8b_layer.ffn --tokens 1,8,16 --reps 20 --no-ceilings >"$out/splitab_$b$r.txt" 2>&1
      echo "== $b $r: exit $?"
      awk '/ \(/ && /\.ffn/ {printf "\n %s:", $1} / ffnc +yes/ {printf " %s %s %s;", $1, $4, $(NF-1)}' "$out/splitab_$b$r.txt"; echo
    done; done
    ;;
  wqsplit)
    # the decode kernels' split rule (ffn_gemm_wqd_splits, pending/wqdsplit.patch, built as ./ffnc)
    # against main's wave-fill rule (.devcarry/ffnc_alt, stripped), untuned, alternating rounds,
    # no graphs, us (~2 minutes); `newt`: the new rule with the 3-CTA i4 family wqd4v2t forced
    # (at 1-8 tokens; the 70B int4 only)
    S=/work/main/bench/suite
    # `v2`: the new build with the 2-CTA family forced (70B int4: without ffn_gemm_prefer_fuller)
    for r in 1 2; do for b in new old newt v2; do
      bin=./ffnc; [ $b = old ] && bin=/work/main/.devcarry/ffnc_alt
      models="$S/llama3_70b_layer_i4g128.ffn $S/llama3_70b_layer_i8.ffn" tokens=1,8,16 force=
      [ $r = 1 ] && models="$models $S/llama3_8b_layer_i4g128.ffn" # its choices are alike under both rules
      [ $b = newt ] && models=$S/llama3_70b_layer_i4g128.ffn tokens=1,8 force=wqd4v2t
      [ $b = v2 ] && models=$S/llama3_70b_layer_i4g128.ffn tokens=1,8 force=wqd4v2
      FFNC_NO_TUNE=1 FFNC_GEMM_VARIANT=$force timeout 60 $bin bench $models --tokens $tokens --reps 20 --no-graphs \
        --no-ceilings >"$out/wqsplit_$b$r.txt" 2>&1
      echo "== $b $r: exit $?"
      awk '/ \(/ && /\.ffn/ {printf "\n %s:", $1} / ffnc +no/ {printf " %s %s;", $1, $4}' "$out/wqsplit_$b$r.txt"; echo
    done; done
    ;;
  wqdq)
    # weight-only quantized products of many rows: bf16 products of the weights dequantized into the
    # workspace (KernelVariant.dq) against the quantized kernels at every row count (FFNC_WQ_DEQUANT=0),
    # the 8B and 70B sublayers, i4 g128 and i8, plain launches; each row checked against the reference
    S=/work/main/bench/suite
    for dq in 1 0; do
      toks=1,16,64,128,256,1024,8192
      [ $dq = 0 ] && toks=64,128,256,1024
      FFNC_WQ_DEQUANT=$dq timeout 200 ./ffnc bench $S/llama3_8b_layer_i4g128.ffn $S/llama3_8b_layer_i8.ffn \
        $S/llama3_70b_layer_i4g128.ffn $S/llama3_70b_layer_i8.ffn --tokens $toks --reps 10 --no-graphs --no-ceilings \
        >"$out/wqdq_$dq.txt" 2>&1
      echo "== FFNC_WQ_DEQUANT=$dq: exit $?"; grep -E "suite|  ffnc" "$out/wqdq_$dq.txt"
    done
    ;;
  bars)
    # the rows of issues 9 and 10 that have bars, in about 2 minutes (for a call with little device
    # time left; lowp is the whole table): fp8 70B and 8B, bf16 8B at 1, 128 and 8192 tokens
    # beside torch's best, then int4 g128 and int8 decode at one token
    S=/work/main/bench/suite
    timeout 150 ./ffnc bench $S/llama3_70b_layer_f8.ffn $S/llama3_8b_layer_f8.ffn $S/llama3_8b_layer.ffn \
      --tokens 1,128,8192 --reps 20 --json "$out/bars.json" >"$out/bars.txt" 2>&1
    echo "bars bench: exit $?"; grep -E "suite|ceilings|  ffnc" "$out/bars.txt"
    timeout 60 ./ffnc bench $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i8.ffn \
      --tokens 1 --reps 10 --no-graphs --no-ceilings >"$out/bars_int.txt" 2>&1
    echo "int bench: exit $?"; grep -E "suite|  ffnc" "$out/bars_int.txt"
    PYTHONUNBUFFERED=1 timeout 120 python3 /work/main/bench/torch_peer.py --ffnc "$out/bars.json" \
      --models llama3_8b_layer --reps 20 >"$out/torch_bars.txt" 2>&1
    echo "torch: exit $?"; grep -E "^\|" "$out/torch_bars.txt"
    ;;
  probe)
    # bench/probe: gemm_wqrs (i4 weights as wgmma's register operand) checked and timed alone
    # (wqrs_probe CUBIN M N K S G SPLITS [REPS [BM [STATS]]]): the 8B / 70B products and edge
    # shapes with wqrs.cubin, then the main rows with the experiment's other cubins (PROBE_CUBINS)
    P=/work/main/.devcarry/probe
    [ -n "${PROBE_ROWS:-}" ] && printf '%s\n' "$PROBE_ROWS" | while read -r args; do
      timeout 60 $P/wqrs_probe $P/wqrs.cubin $args 2>&1 | tail -2
    done
    [ -z "${PROBE_ROWS:-}" ] && while read -r args; do
      timeout 60 $P/wqrs_probe $P/wqrs.cubin $args 2>&1 | tail -2
    done <<ROWS
128 14336 4096 2 128 1
65 14336 4096 2 128 1
128 4096 14336 1 128 4
1024 14336 4096 2 128 1
1024 4096 14336 1 128 1
64 14336 4096 2 128 1 20 64
128 28672 8192 2 128 1
128 8192 28672 1 128 2
128 14336 4096 2 128 1 20 128 0
1024 14336 4096 2 128 1 20 128 0
100 1000 1000 2 0 1
7 264 192 1 64 3
130 520 4160 2 64 2 5 64
ROWS
    for c in ${PROBE_CUBINS:-}; do
      for args in "128 14336 4096 2 128 1" "128 14336 4096 2 128 1 20 128 0" "1024 14336 4096 2 128 1" "1024 14336 4096 2 128 1 20 128 0"; do
        printf '%s: ' $c; timeout 60 $P/wqrs_probe $P/$c.cubin $args 2>&1 | tail -1
      done
    done
    if [ -n "${PROBE_NCU:-}" ]; then
      timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
        -k regex:probe -s 200 -c 1 -f -o /tmp/probe_ncu $P/wqrs_probe $P/wqrs.cubin $PROBE_NCU 1 >/dev/null 2>&1
      echo "probe ncu: exit $?"
      timeout 60 ncu --import /tmp/probe_ncu.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -9 >"$out/probe_src.csv.xz"
      timeout 60 ncu --import /tmp/probe_ncu.ncu-rep --page details >"$out/probe_det.txt" 2>&1
      grep -E "Duration|Throughput|Issued|Warp Cycles|Stall|No Eligible|Active Warps" "$out/probe_det.txt" | head -30
    fi
    ;;
  rsab)
    # an int4 sublayer (RSAB_MODEL, the 8B's by default) with its products forced onto
    # tmar_128x128x64 (kernels/gemm_wqrs.cuh) against the rule, and (RSAB_VARIANTS "rule nomix")
    # against the rule without the mx variants (FFNC_WQ_MIX=0: the dq path), no graphs
    S=/work/main/bench/suite
    for round in $(seq ${RSAB_ROUNDS:-2}); do
      for t in ${RSAB_TOKENS:-65 128 256 384 512 1024}; do
        for v in ${RSAB_VARIANTS:-rule tmar_128x128x64}; do
          unset FFNC_GEMM_VARIANT FFNC_WQ_MIX
          case $v in rule) ;; nomix) export FFNC_WQ_MIX=0 ;; *) export FFNC_GEMM_VARIANT=$v ;; esac
          printf 'round %s %s %s: ' $round $v $t
          timeout 60 ./ffnc bench $S/${RSAB_MODEL:-llama3_8b_layer_i4g128}.ffn --tokens $t --reps 20 --no-graphs --no-ceilings 2>&1 | grep "  ffnc" | head -1
        done
      done
    done
    unset FFNC_GEMM_VARIANT FFNC_WQ_MIX
    ;;
  kern)
    # each plan kernel's time under ncu (clocks not locked, median of the bench's launches) and its
    # DRAM throughput, for the rows with bars: KERN_ROWS "model:tokens ..."
    S=/work/main/bench/suite
    for r in ${KERN_ROWS:-llama3_8b_layer:1 llama3_8b_layer:128 llama3_8b_layer_i4g128:1 llama3_70b_layer_f8:1 llama3_8b_layer_f8:8192}; do
      m=${r%%:*} t=${r##*:}
      FFNC_NO_TUNE=1 timeout 90 ncu --clock-control none -k regex:'^k[0-9]+_' \
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        ./ffnc bench $S/$m.ffn --tokens $t --reps 3 --no-graphs --no-ceilings >"$out/kern_${m}_$t.txt" 2>&1
      printf '%s %s tokens (exit %s):' $m $t $?
      awk '/^  k[0-9]+_/ {k = $1} /gpu__time_duration.sum/ {d[k] = d[k] " " $3; u[k] = $2} /dram__throughput/ {p[k] = $3}
        END {for (k in d) printf " %s [%s ] %s dram %s%%;", k, d[k], u[k], p[k]}' "$out/kern_${m}_$t.txt"
      echo
    done
    ;;
  bench)
    timeout 420 sh /work/main/bench/run_suite.sh /work/main/build/ffnc "$out" >"$out/bench.log" 2>&1
    echo "bench: exit $?"
    tail -80 "$out/bench.log"
    ;;
  esac
done
