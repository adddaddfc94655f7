#!/bin/sh
# no_gpu_test.sh FFNC MODEL WORKDIR: where there is no GPU, the GPU paths say clearly why they
# cannot run (exit 3, "no CUDA ..." naming the reason) and write no output file; the CPU path
# works. Skipped (77) on machines with a GPU.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
if "$ffnc" --version | grep -q "cuda driver: [0-9]"; then echo "SKIP: this machine has a CUDA driver"; exit 77; fi
"$ffnc" gen "$model" --weights w.st --inputs in.st --dim T=5 || exit 1
rm -f out.st
"$ffnc" run "$model" --weights w.st --input in.st --output out.st --device gpu 2>err.txt; rc=$?
[ $rc -eq 3 ] || { echo "FAIL: exit $rc, expected 3"; cat err.txt; exit 1; }
grep -q "no CUDA" err.txt || { echo "FAIL: unclear message:"; cat err.txt; exit 1; }
[ ! -e out.st ] || { echo "FAIL: an output file was written"; exit 1; }
"$ffnc" run "$model" --weights w.st --input in.st --output out.st 2>note.txt || { echo "FAIL: default device"; exit 1; }
grep -q "running on the CPU reference" note.txt || { echo "FAIL: no note about the CPU fallback"; cat note.txt; exit 1; }
"$ffnc" bench "$model" --tokens 1 2>bench.txt; rc=$?
[ $rc -eq 3 ] && grep -q "no CUDA" bench.txt || { echo "FAIL: bench without GPU: exit $rc"; cat bench.txt; exit 1; }
"$ffnc" tune "$model" --tokens 1,16 2>tune.txt; rc=$?
[ $rc -eq 3 ] && grep -q "tune: no CUDA" tune.txt || { echo "FAIL: tune without GPU: exit $rc"; cat tune.txt; exit 1; }
echo "PASSED: $(cat err.txt)"
