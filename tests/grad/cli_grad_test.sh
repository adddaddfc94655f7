#!/bin/sh
# cli_grad_test.sh FFNC MODEL: `ffnc gen --grad` writes the backward graph's inputs (grad.OUTPUT among
# them), `ffnc run --grad --device cpu` writes a gradient for every input and weight, and
# `--device gpu` is refused (exit 1) with nothing written.
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
out=$("$ffnc" run "$model" --weights "$dir/w.st" --input "$dir/i.st" --output "$dir/g.st" --grad --device gpu 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "run --grad --device gpu: exit $rc, expected 1"
[ ! -e "$dir/g.st" ] || fail "run --grad --device gpu left an output file"
echo "$out" | grep -q "backward on the GPU: not yet" || fail "unexpected message: $out"
echo "ok"
