#!/bin/sh
# tp_bench_test.sh FFNC MODEL WORKDIR: `ffnc bench --tp 2` runs, its ranks agree with the whole
# program (no MISMATCH), and it reports the all-reduce alone and each rank's weight bytes; at
# T = 4096 (4 row blocks by the policy) the ranks also run whole, checked and timed (serial_us).
# Skipped (77) with fewer than 2 GPUs or no NCCL.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
. "$(dirname "$0")/nccl_env.sh"
"$ffnc" bench "$model" --tp 2 --tokens 1,7,64,1000,4096 --reps 5 >out.txt 2>err.txt; rc=$?
cat out.txt
if [ $rc -eq 3 ] && grep -Eq "needs 2 GPUs|no NCCL|not a usable NCCL" err.txt; then echo "SKIP: $(cat err.txt)"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; cat err.txt; exit 1; }
grep -q "allreduce_us" out.txt && grep -q "serial_us" out.txt && grep -q "weights on the device: whole program" out.txt &&
  [ "$(grep -c ' ok (' out.txt)" -eq 5 ] || { echo "FAIL: the report lacks a column or a check"; exit 1; }
# tokens, blocks, tp_us, serial_us: 4096 tokens in 4 blocks, timed whole too
awk '$1 == 4096 && $2 == 4 && $4 ~ /^[0-9.]+$/ { found = 1 } END { exit !found }' out.txt ||
  { echo "FAIL: T=4096 was not run in 4 blocks and whole"; exit 1; }
echo PASSED
