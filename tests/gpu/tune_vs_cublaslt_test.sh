#!/bin/sh
# tune_vs_cublaslt_test.sh FFNC MODEL WORKDIR: `ffnc tune --vs-cublaslt` (in a cache directory of
# its own, so its choices reach no other test) prints, for every GEMM kernel at both token counts,
# the rule's and the tuned time beside cuBLASLt's plain GEMM of the same shape, every time and
# ratio a positive number, and no cuBLASLt failure. Skipped (77) without a GPU.
set -u
ffnc=$1 model=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir" || exit 1
FFNC_CACHE_DIR="$dir/cache" "$ffnc" tune "$model" --tokens 7,64 --vs-cublaslt >"$dir/out.txt" 2>"$dir/err.txt"
rc=$?
cat "$dir/out.txt"
if [ $rc -eq 3 ] && grep -Eq "no CUDA" "$dir/err.txt"; then echo "SKIP: $(cat "$dir/err.txt")"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; cat "$dir/err.txt"; exit 1; }
gemms=$(grep -c "^k[0-9]*: " "$dir/out.txt")
[ "$gemms" -ge 1 ] || { echo "FAIL: no GEMM kernel was tuned"; exit 1; }
grep -q "^vs cuBLASLt" "$dir/out.txt" || { echo "FAIL: no comparison with cuBLASLt"; exit 1; }
if grep -Eq "cuBLASLt: |no cuBLASLt GEMM|not enough device memory" "$dir/out.txt"; then
  echo "FAIL: a kernel was not compared"; exit 1
fi
# gemm rows N K type rule_us TFLOP/s tuned_us lt_us TFLOP/s rule% tuned%: times and ratios
# positive (the rates of a tiny model may print 0.0)
rows=$(awk '/^vs cuBLASLt/ { on = 1; next }
  on && $1 ~ /^k[0-9]+$/ { ok = ($2 == 7 || $2 == 64) && NF == 12
    ok = ok && $6 + 0 > 0 && $8 + 0 > 0 && $9 + 0 > 0 && $7 ~ /^[0-9.]+$/ && $10 ~ /^[0-9.]+$/
    ok = ok && $11 ~ /^[0-9]+%$/ && $12 ~ /^[0-9]+%$/ && $11 + 0 > 0
    if (!ok) { print "bad row: " $0 > "/dev/stderr"; bad = 1 } n++ }
  END { if (bad) exit 1; print n }' "$dir/out.txt") || { echo "FAIL: a row is malformed"; exit 1; }
[ "$rows" -eq $((2 * gemms)) ] || { echo "FAIL: $rows rows for $gemms GEMM kernels at 2 token counts"; exit 1; }
echo PASSED
