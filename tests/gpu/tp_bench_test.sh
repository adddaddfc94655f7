#!/bin/sh
# tp_bench_test.sh FFNC MODEL WORKDIR: `ffnc bench --tp 2` runs, its ranks agree with the whole
# program (no MISMATCH), and it reports the all-reduce alone and each rank's weight bytes.
# Skipped (77) with fewer than 2 GPUs or no NCCL.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
. "$(dirname "$0")/nccl_env.sh"
"$ffnc" bench "$model" --tp 2 --tokens 1,7,64,1000 --reps 5 >out.txt 2>err.txt; rc=$?
cat out.txt
if [ $rc -eq 3 ] && grep -Eq "needs 2 GPUs|no NCCL|not a usable NCCL" err.txt; then echo "SKIP: $(cat err.txt)"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; cat err.txt; exit 1; }
grep -q "allreduce_us" out.txt && grep -q "weights on the device: whole program" out.txt &&
  [ "$(grep -c ' ok (' out.txt)" -eq 4 ] || { echo "FAIL: the report lacks a column or a check"; exit 1; }
echo PASSED
