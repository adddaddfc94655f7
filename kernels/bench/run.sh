#!/bin/bash
# One device call: (re)build if the carried binary does not start there; then one bench process per
# configuration (a kernel fault loses only that configuration), one for memcpy and cuBLASLt, within a
# time budget. Logs go to OUTDIR (default build/): bench.log (everything), results.csv (timings),
# summary.txt. Usage: kernels/bench/run.sh [OUTDIR [gemm_bench options...]]
# BENCH_ORDER (configuration names and @lib) replaces the default list of processes;
# BENCH_SASS (kernel names) the kernels whose instruction mix goes to sass_mix.txt.
set -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
[ $# -gt 0 ] && shift # the rest goes to gemm_bench
budget=${BENCH_BUDGET_S:-265}
mkdir -p "$out"
cd "$here" || exit 1
start=$(date +%s)
{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE; } > "$out/gpu.txt" 2>&1
if ! ./build/gemm_bench --compile-only --filter @none > /dev/null 2>&1; then
  echo "carried binary does not start here: rebuilding"
  rm -f build/gemm_bench && make build/gemm_bench || exit 1
fi
nvidia-smi dmon -s pc -d 2 > "$out/dmon.txt" 2>&1 &
dmon=$!
refc=$(mktemp -d)
rm -f "$out/results.csv" "$out/bench.log"
# recommended first, then the library ceilings, then the other variants, most interesting first
order=${BENCH_ORDER:-"$(./build/gemm_bench --list | grep -v sm90 | head -6) @lib sm80_128x256x64 sm80_128x256x32s3
  sm80_256x128x32 sm80_128x128x64 sm80_16x256x64 sm80_32x128x64 simt_128x64x8 sm80_16x128x128 sm80_64x256x64
  sm80_128x128x32w8"}
status=0
for cfg in $order; do
  left=$((budget - ($(date +%s) - start)))
  if [ $left -lt 12 ]; then
    echo "SKIPPED $cfg: out of time" | tee -a "$out/bench.log"
    continue
  fi
  if [ "$cfg" = @lib ]; then args="--lib"; else args="--no-lib --filter ${cfg}_s"; fi
  echo "=== $cfg ($left s left)" | tee -a "$out/bench.log"
  before=$(wc -l < "$out/bench.log")
  limit=$left
  [ -n "${BENCH_PROC_S:-}" ] && [ "$BENCH_PROC_S" -lt "$limit" ] && limit=$BENCH_PROC_S
  timeout "$limit" ./build/gemm_bench $args --refcache "$refc" --csv "$out/results.csv" "$@" >> "$out/bench.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  # digest on stdout: failures, faults, and the totals line
  tail -n +$((before + 1)) "$out/bench.log" | grep -E "FAIL|failed|error|CUDA_ERROR|table says|Error|^correctness" | head -12
  echo "    rc=$rc after $(($(date +%s) - start)) s"
done
kill $dmon 2> /dev/null
python3 summary.py "$out/results.csv" > "$out/summary.txt" 2>&1
cat "$out/summary.txt"
cache=cache
prev=
for a in "$@"; do [ "$prev" = --cache ] && cache=$a; prev=$a; done
for k in ${BENCH_SASS:-sm80_128x256x32_s2_st1_bf16 sm80_16x128x64_s2_st1_bf16 simt_128x128x8_s2_st1_f32}; do
  f=$(ls $cache/$k-*.cubin 2> /dev/null | head -1)
  [ -n "$f" ] || continue
  echo "== $k"
  cuobjdump --dump-sass "$f" > "$refc/sass.txt"
  echo "tensor-core instructions: $(grep -cE 'HGMMA|HMMA' "$refc/sass.txt") (HGMMA $(grep -c HGMMA "$refc/sass.txt")), local loads/stores: $(grep -cE 'LDL|STL' "$refc/sass.txt")"
  grep -oE '/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T]+\s+)?[A-Z][A-Z0-9._]*' "$refc/sass.txt" | awk '{print $NF}' | sort | uniq -c | sort -rn | head -40
done > "$out/sass_mix.txt" 2>&1
rm -rf "$refc"
exit $status
