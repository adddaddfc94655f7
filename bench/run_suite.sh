#!/bin/sh
# bench/run_suite.sh FFNC OUTDIR [TOKENS]
# Runs the whole suite in one process (the ceilings are measured once): writes
# OUTDIR/bench.json, OUTDIR/bench.txt (the table) and OUTDIR/bench.dat/.gp (the plot's data and
# gnuplot script; OUTDIR/bench.png where gnuplot is installed).
set -eu
ffnc=$1 out=$2 tokens=${3:-1,16,128,1024,8192}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
"$ffnc" bench "$here/suite/llama3_8b_layer.ffn" "$here/suite/llama3_70b_layer.ffn" \
  "$here/suite/gpt_gelu_4096.ffn" "$here/suite/llama3_8b_4layers.ffn" "$here/suite/llama3_8b_4layers_fused.ffn" \
  "$here/suite/llama3_8b_layer_i4g128.ffn" "$here/suite/llama3_8b_layer_i8.ffn" \
  "$here/suite/llama3_70b_layer_i4g128.ffn" "$here/suite/llama3_70b_layer_i8.ffn" \
  --tokens "$tokens" --json "$out/bench.json" --plot "$out/bench" | tee "$out/bench.txt"
# The error FFN Fusion introduces into the fused model above, on 64 calibration rows (random
# weights: real checkpoints have far weaker dependence between sublayers than random ones).
"$ffnc" gen "$here/suite/llama3_8b_4layers.ffn" --weights "$out/w4.safetensors" --inputs "$out/calib.safetensors" \
  --dim T=64 --seed 7 >/dev/null
"$ffnc" analyze "$here/suite/llama3_8b_4layers.ffn" --weights "$out/w4.safetensors" --input "$out/calib.safetensors" \
  --json "$out/analyze_4layers.json" | tee "$out/analyze_4layers.txt"
rm -f "$out/w4.safetensors"
