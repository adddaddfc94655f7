#!/bin/sh
# scripts/paircall.sh OUT PART...: the device calls for the decode pair (pending/pair.patch,
# kernels/gemm_pair.cuh). Made here first: `git apply pending/pair.patch` and build (`new`),
# `sh scripts/ab_builds.sh` (.devcarry/ffnc_alt = main without it), `ctest -L nvrtc` for the
# tests' kernels, the suite's models compiled into the same kernel cache by both binaries
# (`FFNC_CACHE_DIR=build/test-kernel-cache FFNC_SOURCE_DIR=$PWD ffnc bench --compile-only --arch
# sm_90 MODELS`, the models of `ab` below), `sh scripts/devcarry.sh`; then on the device (carry
# .devcarry), one call a part:
#   tests  every GPU test (330, the pair's 30 new ones among them) and compute-sanitizer memcheck
#          on five paired models at 1 and 8 tokens (about 5 minutes);
#   ab     the paired suite sublayers (bf16, i4, i8; 8B and 70B; GPT GELU) at 1 / 4 / 8 / 16 tokens
#          with new, new under FFNC_PAIR=0 and old, alternately, two rounds (us, no graphs; about
#          5 minutes).
set -u
out=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
for part in "$@"; do
  case $part in
  tests)
    sh "$here/scripts/gpu_session.sh" "$out" tests
    cd /work/main/build || exit 1
    export LD_LIBRARY_PATH=/work/main/.devcarry/lib FFNC_CACHE_DIR=/work/main/build/test-kernel-cache
    for m in tests/gpu/models/wq_gpt_i4g64_bf16 tests/gpu/models/wq_oddk_i4g128_bf16 tests/gpu/models/wq_llama_i8_bf16 \
      tests/gpu/models/gpt_bf16 examples/llama3_tiny; do
      FFNC_TEST_TOKENS=1,8 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
        ./tests/gpu_model_test /work/main/$m.ffn >"$out/memcheck_$(basename $m).log" 2>&1
      echo "memcheck $m: exit $? ($(grep -E 'ERROR SUMMARY' "$out/memcheck_$(basename $m).log" | tail -1))"
    done
    ;;
  ab)
    [ -e "$here/build" ] || ln -sfn "$here/.devcarry/build" "$here/build"
    [ -f "$here/.devcarry/cache.tar.xz" ] && tar xJf "$here/.devcarry/cache.tar.xz" -C "$here/.devcarry/build"
    [ "$here" = /work/main ] || ln -sfn "$here" /work/main
    cd /work/main/build || exit 1
    export LD_LIBRARY_PATH=/work/main/.devcarry/lib FFNC_NO_TUNE=1 FFNC_CACHE_DIR=/work/main/build/test-kernel-cache
    S=/work/main/bench/suite
    for r in 1 2; do
      for m in llama3_8b_layer llama3_8b_layer_i4g128 llama3_8b_layer_i8 llama3_70b_layer llama3_70b_layer_i4g128 \
        llama3_70b_layer_i8 gpt_gelu_4096; do
        for b in new nopair old; do
          case $b in
          new) bin=./ffnc env= ;;
          nopair) bin=./ffnc env=FFNC_PAIR=0 ;;
          old) bin=/work/main/.devcarry/ffnc_alt env= ;;
          esac
          t=$(env $env timeout 100 "$bin" bench $S/$m.ffn --tokens 1,4,8,16 --reps 20 --no-graphs --no-ceilings 2>&1 |
            awk '$2 == "ffnc" { printf "%s:%s(%s) ", $1, $4, $NF }')
          echo "== round $r $m $b $t"
        done
      done
    done 2>&1 | tee "$out/pairab.txt"
    ;;
  esac
done
