#!/bin/sh
# cli_grad_test.sh FFNC MODEL: `ffnc gen --grad` writes the backward graph's inputs (grad.OUTPUT among
# them), `ffnc run --grad --device cpu` writes a gradient for every input and weight, `ffnc build
# --grad` compiles the backward graph (AOT package, NVRTC), so does `ffnc bench --grad --compile-only`
# (with the program), and `--device gpu` agrees with the CPU; with --keep, gen computes the saved
# tensors and the keep backward graph gives the recompute one's gradients
# (where there is no GPU: exit 3, "no CUDA device", nothing written).
set -u
ffnc=$1 model=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$ffnc" gen "$model" --weights "$dir/w.st" --inputs "$dir/i.st" --dim T=5 --grad || fail "gen --grad"
head -c 4096 "$dir/i.st" | grep -aq '"grad.x"' || fail "gen --grad wrote no grad.x input"
"$ffnc" run "$model" --weights "$dir/w.st" --input "$dir/i.st" --output "$dir/o.st" --grad --device cpu ||
  fail "run --grad --device cpu"
for t in grad.x grad.model.layers.0.mlp.gate_proj.weight grad.model.layers.2.post_attention_layernorm.weight; do
  head -c 8192 "$dir/o.st" | grep -aq "\"$t\"" || fail "no $t in the gradients"
done
# the keep policy: gen --grad --keep computes the saved tensors with the training forward; the keep
# backward graph's gradients on the CPU reference are those of the recompute one, bit for bit
"$ffnc" gen "$model" --weights "$dir/kw.st" --inputs "$dir/ki.st" --dim T=5 --grad --keep || fail "gen --grad --keep"
head -c 8192 "$dir/ki.st" | grep -aq '"saved.model.layers.0.mlp.gate_proj"' || fail "gen --grad --keep wrote no saved tensor"
"$ffnc" run "$model" --weights "$dir/kw.st" --input "$dir/ki.st" --output "$dir/ko.st" --grad --keep --device cpu ||
  fail "run --grad --keep --device cpu"
"$ffnc" compare "$dir/ko.st" "$dir/o.st" --tol 0 >/dev/null || fail "keep gradients differ from recompute ones"
"$ffnc" run "$model" --weights "$dir/kw.st" --input "$dir/ki.st" --output "$dir/kf.st" --keep --device cpu ||
  fail "run --keep (the training forward)"
head -c 8192 "$dir/kf.st" | grep -aq '"saved.model.layers.2.mlp.down_proj"' || fail "run --keep wrote no saved tensor"
out=$("$ffnc" gen "$model" --inputs "$dir/x.st" --dim T=5 --grad --keep 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "give --weights" && [ ! -e "$dir/x.st" ] || fail "gen --grad --keep without weights: $out"
"$ffnc" build "$model" --grad --arch sm_90 -o "$dir/grad.ffnx" || fail "build --grad"
[ -s "$dir/grad.ffnx" ] || fail "build --grad wrote no package"
# bf16 products of the backward graph on the tensor cores: weight gradients in matmul_at_tc, no
# f32 copy of a weight (the gradient is rounded to bf16 instead: passes/grad.c)
"$ffnc" build "$model" --grad --arch sm_90 --emit cuda -o "$dir/grad.cu" || fail "build --grad --emit cuda"
grep -q "ffn::matmul_at_tc<ffn::bf16, float>" "$dir/grad.cu" || fail "no tensor-core weight gradient in the CUDA"
grep -q "ffn::matmul_at<" "$dir/grad.cu" && fail "an f32 weight gradient in the CUDA of a bf16 model"
"$ffnc" build "$model" --grad --arch sm_90 --emit plan -o "$dir/grad.plan" || fail "build --grad --emit plan"
grep -q "^prep cast" "$dir/grad.plan" && fail "a weight widened at load time in the plan of a bf16 model"
# bench --grad: the programs and backward graphs compile into the cache without a GPU; what it cannot do
# yet is refused as usage
out=$("$ffnc" bench --grad --compile-only "$model" 2>&1) || fail "bench --grad --compile-only: $out"
echo "$out" | grep -q "and their backward graphs" || fail "bench --grad --compile-only said: $out"
out=$("$ffnc" bench --grad "$model" --tokens 8 --plot "$dir/p" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "not yet" || fail "bench --grad --plot: $out"
out=$("$ffnc" run "$model" --weights "$dir/w.st" --input "$dir/i.st" --output "$dir/g.st" --grad --device gpu 2>&1)
rc=$?
if [ $rc -eq 3 ] && echo "$out" | grep -q "no CUDA"; then
  [ ! -e "$dir/g.st" ] || fail "run --grad --device gpu without a GPU left an output file"
  echo "ok (the GPU part needs a GPU: $out)"
  exit 0
fi
[ $rc -eq 0 ] || fail "run --grad --device gpu: exit $rc: $out"
"$ffnc" compare "$dir/g.st" "$dir/o.st" --tol 1.5e-2 || fail "GPU gradients differ from the CPU's"
"$ffnc" run "$model" --weights "$dir/kw.st" --input "$dir/ki.st" --output "$dir/kg.st" --grad --keep --device gpu ||
  fail "run --grad --keep --device gpu"
"$ffnc" compare "$dir/kg.st" "$dir/o.st" --tol 1.5e-2 || fail "GPU keep gradients differ from the CPU's"
echo "ok"
