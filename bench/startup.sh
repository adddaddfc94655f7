#!/bin/sh
# startup.sh FFNC [MODEL] [ARCH] [RUNS]: cold and warm JIT start-up of `ffnc build MODEL --arch
# ARCH`: cold with an empty kernel cache, warm right after from that cache (the time includes
# writing the AOT package). Wall seconds per run; -v's summary line of the cold run too.
# Defaults: examples/llama3_8b.ffn, sm_90, 5 runs. bench/RESULTS.md, "Start-up".
set -eu
ffnc=$1 model=${2:-examples/llama3_8b.ffn} arch=${3:-sm_90} runs=${4:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
now() { date +%s.%N; }
for i in $(seq "$runs"); do
  cache="$out/cache$i"
  a=$(now)
  FFNC_CACHE_DIR="$cache" "$ffnc" build "$model" --arch "$arch" -o "$out/p.ffnx" -v 2> "$out/err"
  b=$(now)
  FFNC_CACHE_DIR="$cache" "$ffnc" build "$model" --arch "$arch" -o "$out/p.ffnx"
  c=$(now)
  awk -v a="$a" -v b="$b" -v c="$c" -v s="$(tail -n 1 "$out/err")" 'BEGIN { printf "cold %.2f s  warm %.3f s  (%s)\n", b - a, c - b, s }'
done
