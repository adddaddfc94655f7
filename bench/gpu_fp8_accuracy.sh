#!/bin/sh
# bench/gpu_fp8_accuracy.sh FFNC OUTDIR: the fp8 error of the Llama-3-8B sublayer on the GPU machine,
# ffnc (`ffnc analyze --device gpu`: the compiled fp8 kernels against the program in f32 without
# quantization) on random weights and 64 rows of normal and outlier-channel activations, beside
# torch's per-tensor and row-wise fp8 on the same kind of data (bench/fp8_accuracy.py).
set -eu
ffnc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
"$ffnc" gen "$here/suite/llama3_8b_layer_f8.ffn" --weights "$out/w8.safetensors" --inputs "$out/x.safetensors" \
  --dim T=64 --seed 11 >/dev/null
python3 "$here/fp8_accuracy.py" --outliers "$out/x.safetensors" "$out/x_outliers.safetensors"
for x in x x_outliers; do
  echo "ffnc fp8 e4m3 rowwise, input $x:"
  "$ffnc" analyze "$here/suite/llama3_8b_layer_f8.ffn" --weights "$out/w8.safetensors" --input "$out/$x.safetensors" \
    --device gpu | sed -n "/^output/,/^$/p"
done
python3 "$here/fp8_accuracy.py" --tokens 64
rm -f "$out/w8.safetensors"
