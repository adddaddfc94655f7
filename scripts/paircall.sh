#!/bin/sh
# scripts/paircall.sh OUT: the device call for the decode pair (pending/pair.patch,
# kernels/gemm_wqf.cuh), about 6-7 minutes. Made here first: `git apply pending/pair.patch` and
# build (`new`), `sh scripts/ab_builds.sh` (.devcarry/ffnc_alt = main without it), the suite's
# weight-only models compiled into the kernel cache by both (`FFNC_CACHE_DIR=build/test-kernel-cache
# ffnc bench --compile-only --arch sm_90 MODELS`, after `ctest -L nvrtc -R wq` has filled it for the
# tests), `sh scripts/devcarry.sh`; then on the device (carry .devcarry): every GPU test,
# compute-sanitizer memcheck on three paired models at 1 and 8 tokens, and the weight-only
# sublayers at 1 / 4 / 8 / 16 tokens with new, new under FFNC_WQ_PAIR=0 and old, alternately, two
# rounds (us, no graphs).
set -u
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
sh "$here/scripts/gpu_session.sh" "$out" tests
cd /work/main/build || exit 1
export LD_LIBRARY_PATH=/work/main/.devcarry/lib FFNC_NO_TUNE=1 FFNC_CACHE_DIR=/work/main/build/test-kernel-cache
for m in wq_gpt_i4g64_bf16 wq_oddk_i4g128_bf16 wq_llama_i8_bf16; do
  FFNC_TEST_TOKENS=1,8 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./tests/gpu_model_test /work/main/tests/gpu/models/$m.ffn >"$out/memcheck_$m.log" 2>&1
  echo "memcheck $m: exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck_$m.log" | tail -1))"
done
S=/work/main/bench/suite
for r in 1 2; do
  for m in llama3_8b_layer_i4g128 llama3_8b_layer_i8 llama3_70b_layer_i4g128 llama3_70b_layer_i8; do
    for b in new nopair old; do
      case $b in
      new) bin=./ffnc env= ;;
      nopair) bin=./ffnc env=FFNC_WQ_PAIR=0 ;;
      old) bin=/work/main/.devcarry/ffnc_alt env= ;;
      esac
      t=$(env $env timeout 120 "$bin" bench $S/$m.ffn --tokens 1,4,8,16 --reps 20 \
        --no-graphs --no-ceilings 2>&1 | awk '$2 == "ffnc" { printf "%s:%s(%s) ", $1, $4, $NF }')
      echo "== round $r $m $b $t"
    done
  done
done 2>&1 | tee "$out/pairab.txt"
