#!/bin/bash
# One device call for gemm_sm90_persistent (kernels/NOTES.md, "persistent"): the candidates' full
# correctness suite, then the Llama-3-8B shapes at M = 1024, 4096, 8192 for the table's
# sm90_128x256x64, the candidates and cuBLASLt, one process each (a trap loses only that step),
# within BUDGET seconds. Cubins come from build/cache_p, compiled beforehand on a machine without a
# GPU: make build/gemm_bench && build/gemm_bench --compile-only --arch 90 --cache build/cache_p
#   --filter sm90p,sm90_128x256x64_s,sm90_128x128x64_s
# Usage: kernels/bench/run_sm90p.sh OUTDIR [BUDGET]   (logs: bench.log, results.csv, summary.txt,
# compare.txt, sass.txt, gpu.txt). Priorities: checks and timings of the first two candidates first.
set -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build/p}
budget=${2:-160}
mkdir -p "$out"
cd "$here" || exit 1
start=$(date +%s)
{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE; } > "$out/gpu.txt" 2>&1
if ! ./build/gemm_bench --compile-only --filter @none > /dev/null 2>&1; then
  echo "carried binary does not start here: rebuilding"
  rm -f build/gemm_bench && make build/gemm_bench > /dev/null || exit 1
fi
refc=$(mktemp -d)
rm -f "$out/results.csv" "$out/bench.log"
status=0
step() { # NAME LIMIT_S gemm_bench-args...
  local name=$1 lim=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  if [ $left -lt 8 ]; then
    echo "SKIPPED $name: out of time" | tee -a "$out/bench.log"
    return
  fi
  [ "$lim" -gt "$left" ] && lim=$left
  echo "=== $name" >> "$out/bench.log"
  local before=$(wc -l < "$out/bench.log")
  timeout "$lim" ./build/gemm_bench --cache build/cache_p --refcache "$refc" --csv "$out/results.csv" "$@" \
    >> "$out/bench.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && status=1
  local log=$(tail -n +$((before + 1)) "$out/bench.log")
  echo "$name: rc=$rc at $(($(date +%s) - start)) s, $(grep -c '^PASS' <<< "$log") PASS, $(grep -c '^FAIL' <<< "$log") FAIL"
  grep -E "^FAIL|WRONG|rror|trap|table says" <<< "$log" | head -6
  grep -E "err [0-9]" <<< "$log" | awk '{for (i = 1; i < NF; i++) if ($i == "err") print $(i + 1)}' | sort -g | tail -1 |
    sed 's/^/    largest norm-wise error: /'
}
ms=1024,4096,8192
step check-pp 40 --no-lib --no-time --filter sm90p_pp_128x128x64_s
step check-coop 40 --no-lib --no-time --filter sm90p_coop_128x256x64_s
step time-old 35 --no-lib --no-check --filter sm90_128x256x64_s --ms $ms
step time-pp 30 --no-lib --no-check --filter sm90p_pp_128x128x64_s --ms $ms
step time-coop 30 --no-lib --no-check --filter sm90p_coop_128x256x64_s --ms $ms
step time-lib 25 --lib --ms $ms
step check-pp64 35 --no-lib --no-time --filter sm90p_pp_64x256x64_s
step time-pp64 30 --no-lib --no-check --filter sm90p_pp_64x256x64_s --ms $ms
step time-old-again 25 --no-lib --no-check --filter sm90_128x256x64_s --ms 4096,8192
step time-128x128 25 --no-lib --no-check --filter sm90_128x128x64_s --ms $ms
python3 summary.py "$out/results.csv" > "$out/summary.txt" 2>&1
python3 compare.py "$out/results.csv" sm90_128x256x64 sm90p_pp_128x128x64 sm90p_coop_128x256x64 sm90p_pp_64x256x64 \
  sm90_128x128x64 > "$out/compare.txt" 2>&1
for k in sm90p_pp_128x128x64_s2_st1_bf16 sm90p_coop_128x256x64_s1_st0_bf16 sm90p_pp_64x256x64_s1_st0_bf16; do
  f=$(ls build/cache_p/$k-*.cubin 2> /dev/null | head -1)
  [ -n "$f" ] || continue
  cuobjdump --dump-sass "$f" > "$refc/sass.txt" 2>&1
  echo "$k: HGMMA $(grep -c HGMMA "$refc/sass.txt"), LDL/STL $(grep -cE 'LDL|STL' "$refc/sass.txt"), BAR $(grep -cE ' BAR' "$refc/sass.txt"), SETMAXNREG/USETMAXREG $(grep -cE 'SETMAXREG|USETMAXREG' "$refc/sass.txt")"
done > "$out/sass.txt" 2>&1
rm -rf "$refc"
cat "$out/sass.txt" "$out/compare.txt"
grep -E "^kernel .*(sm90p_.*_s2_st1_bf16)" "$out/bench.log" | sort -u
echo "total $(($(date +%s) - start)) s"
exit $status
