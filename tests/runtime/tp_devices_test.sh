#!/bin/sh
# tp_devices_test.sh FFNC MODEL WORKDIR: `--tp 8` on a machine with fewer than 8 GPUs (none
# here in CI) says so before compiling ("--tp 8 needs 8 GPUs, this machine has M"), exit 3, no
# output written; for `ffnc run --device gpu` and `ffnc bench`. Skipped (77) with 8 GPUs or more.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
"$ffnc" gen "$model" --weights w.st --inputs in.st --dim T=5 || exit 1
rm -f out.st
"$ffnc" run "$model" --tp 8 --device gpu --weights w.st --input in.st --output out.st 2>err.txt; rc=$?
if [ $rc -eq 0 ] || grep -q "NCCL" err.txt; then echo "SKIP: this machine has 8 GPUs or more"; exit 77; fi
[ $rc -eq 3 ] || { echo "FAIL: run: exit $rc, expected 3"; cat err.txt; exit 1; }
grep -Eq "^ffnc: error: run: --tp 8 needs 8 GPUs, this machine has (none \(.+\)|[1-7])$" err.txt ||
  { echo "FAIL: run: unclear message:"; cat err.txt; exit 1; }
[ ! -e out.st ] || { echo "FAIL: an output file was written"; exit 1; }
"$ffnc" bench "$model" --tp 8 --tokens 1 2>bench.txt; rc=$?
[ $rc -eq 3 ] && grep -q "bench: --tp 8 needs 8 GPUs, this machine has" bench.txt ||
  { echo "FAIL: bench: exit $rc"; cat bench.txt; exit 1; }
# without --device, a machine with too few GPUs runs the ranks on the CPU reference, saying why
"$ffnc" run "$model" --tp 8 --weights w.st --input in.st --output out.st 2>note.txt ||
  { echo "FAIL: default device"; cat note.txt; exit 1; }
grep -q "running on the CPU reference" note.txt || { echo "FAIL: no note about the CPU"; cat note.txt; exit 1; }
echo "PASSED: $(cat err.txt)"
