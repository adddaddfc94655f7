#!/bin/sh
# cli_run_test.sh FFNC MODEL WORKDIR: `ffnc run --device gpu` (compile, bind the weights file,
# run, write the outputs) agrees with `--device cpu` on generated weights and inputs.
set -u
ffnc=$1 model=$2 dir=$3
mkdir -p "$dir" && cd "$dir" || exit 1
"$ffnc" gen "$model" --weights w.st --inputs in.st --dim T=77 --seed "$$" || exit 1
"$ffnc" run "$model" --weights w.st --input in.st --output gpu.st --device gpu 2>err.txt; rc=$?
if [ $rc -eq 3 ] && grep -q "no CUDA" err.txt; then echo "SKIP: $(cat err.txt)"; exit 77; fi
[ $rc -eq 0 ] || { echo "FAIL: gpu run exit $rc"; cat err.txt; exit 1; }
"$ffnc" run "$model" --weights w.st --input in.st --output cpu.st --device cpu || exit 1
"$ffnc" compare gpu.st cpu.st --tol 1.5e-2
