#!/bin/sh
# scripts/example.sh: on a fresh machine, install what is missing, build, and run the
# Llama-3-shaped example end to end with generated weights: on the CPU reference, and on the
# GPU where there is one, comparing the two.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build --target ffnc >/dev/null
ffnc=build/ffnc
model=examples/llama3_tiny.ffn
work=build/example
mkdir -p $work
echo "== $model"
$ffnc check $model
$ffnc gen $model --weights $work/weights.safetensors --inputs $work/inputs.safetensors --dim T=64 --seed 1
echo "== CPU reference"
$ffnc run $model --weights $work/weights.safetensors --input $work/inputs.safetensors \
  --output $work/out_cpu.safetensors --device cpu
$ffnc build $model --emit plan -o - | grep '^step'
if $ffnc run $model --weights $work/weights.safetensors --input $work/inputs.safetensors \
     --output $work/out_gpu.safetensors --device gpu 2>$work/gpu.err; then
  echo "== GPU (fused kernels) against the CPU reference"
  $ffnc compare $work/out_gpu.safetensors $work/out_cpu.safetensors --tol 1.5e-2
else
  echo "== GPU: not run: $(cat $work/gpu.err)"
fi
echo "outputs in $work/"
