#!/bin/sh
# host_examples_test.sh FFNC JIT_RUN AOT_RUN MODEL WORKDIR
# The JIT host program and the AOT host program (run with NVRTC disabled, so it can only
# succeed without a compiler) give identical checksums for the same model and input.
set -u
ffnc=$1 jit=$2 aot=$3 model=$4 dir=$5
mkdir -p "$dir" && cd "$dir" || exit 1
"$ffnc" gen "$model" --weights w.safetensors --seed 3 || exit 1
out=$("$jit" "$model" w.safetensors 37 2>&1); rc=$?
case "$out" in *"no CUDA"*|*"cannot load libcuda"*) echo "SKIP: $out"; exit 77;; esac
[ $rc -eq 0 ] || { echo "jit_run failed ($rc): $out"; exit 1; }
echo "jit: $out"
"$ffnc" build "$model" -o model.ffnx || exit 1
aout=$(FFNC_DISABLE_NVRTC=1 "$aot" model.ffnx w.safetensors 37 2>&1) || { echo "aot_run failed: $aout"; exit 1; }
echo "aot: $aout"
[ "$out" = "$aout" ] || { echo "FAIL: JIT and AOT outputs differ"; exit 1; }
# and without NVRTC, JIT compilation must fail cleanly
FFNC_DISABLE_NVRTC=1 "$jit" "$model" w.safetensors 37 >no_nvrtc.txt 2>&1 && { echo "FAIL: JIT ran without NVRTC"; exit 1; }
grep -q "NVRTC is disabled" no_nvrtc.txt || { echo "FAIL: unclear error without NVRTC:"; cat no_nvrtc.txt; exit 1; }
echo PASSED
