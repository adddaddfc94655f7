#!/bin/sh
# scripts/fusedk.sh OUT: the fused 4 x 8B stack against the unfused one at 8192 tokens, kernel by
# kernel (ncu: time, tensor pipe, DRAM), to see where the fused model's extra 12% goes
set -u
out=$1 S=/work/main/bench/suite
cd /work/main/build || exit 1
for m in llama3_8b_4layers_fused llama3_8b_4layers; do
  FFNC_NO_TUNE=1 timeout 120 ncu --kernel-name regex:"^k[0-9]" --launch-count 10 \
    --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
    ./ffnc bench $S/$m.ffn --tokens 8192 --reps 1 --no-graphs --no-ceilings >"$out/fusedk_$m.txt" 2>&1
  echo "== $m: exit $?"; grep -E "^  [a-zA-Z_0-9]+.*\(|duration|hmma|dram__|grid_size" "$out/fusedk_$m.txt" | cut -c1-110 | head -60
done
