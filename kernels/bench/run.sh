#!/bin/bash
# One device call: (re)build if the carried binary does not start there, check every variant and
# shape, time them, and leave the logs in OUTDIR (default build/). Usage: kernels/bench/run.sh OUTDIR
set -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
[ $# -gt 0 ] && shift # the rest goes to gemm_bench
mkdir -p "$out"
cd "$here" || exit 1
{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE; } > "$out/gpu.txt" 2>&1
if ! ./build/gemm_bench --compile-only --filter @none > /dev/null 2>&1; then
  echo "carried binary does not start here: rebuilding"
  rm -f build/gemm_bench && make build/gemm_bench || exit 1
fi
nvidia-smi dmon -s pc -d 2 > "$out/dmon.txt" 2>&1 &
dmon=$!
timeout 270 ./build/gemm_bench --csv "$out/results.csv" "$@" 2>&1 | tee "$out/bench.log"
rc=$?
kill $dmon 2> /dev/null
# What the compiler made of the main variants: instruction mix of the SASS.
for k in sm80_128x256x32_s2_st1_bf16 sm80_16x128x64_s2_st1_bf16 simt_128x128x8_s2_st1_f32; do
  f=$(ls cache/$k-*.cubin 2> /dev/null | head -1)
  [ -n "$f" ] || continue
  echo "== $k"
  cuobjdump --dump-sass "$f" | grep -oE '/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T]+\s+)?[A-Z][A-Z0-9._]*' | awk '{print $NF}' | sort | uniq -c | sort -rn | head -40
done > "$out/sass_mix.txt" 2>&1
f=$(ls cache/sm80_128x256x32_s2_st1_bf16-*.cubin 2> /dev/null | head -1)
[ -n "$f" ] && cuobjdump --dump-sass "$f" > "$out/sass_128x256.txt" 2>&1
exit $rc
