#!/bin/sh
# scripts/fusedclk.sh OUT: the fused and unfused 4 x 8B stacks at 8192 tokens alternately, with
# the SM clock, power and throttle reasons logged every 50 ms (OUT/clk.csv, OUT/marks.txt: each
# run's start and end), then ncu without clock control (the clock each GEMM ran at). The
# thirty-third session's call 3: the fused stack took the same cycles at ~10% lower clocks.
# Run on the GPU machine after scripts/gpu_session.sh has linked the build (or with build/ there).
set -u
out=$1 S=/work/main/bench/suite
mkdir -p "$out"
cd /work/main/build || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 50 >"$out/clk.csv" 2>&1 &
smi=$!
for i in 1 2; do for m in llama3_8b_4layers_fused llama3_8b_4layers; do
  echo "$m $i start $(date +%T.%N)" >>"$out/marks.txt"
  FFNC_NO_TUNE=1 timeout 60 ./ffnc bench $S/$m.ffn --tokens 8192 --reps 20 --no-graphs --no-ceilings >"$out/b_${m}_$i.txt" 2>&1
  echo "$m $i end $(date +%T.%N)" >>"$out/marks.txt"
  echo "$m $i: $(grep -E '^ +8192 ' "$out/b_${m}_$i.txt" | tr -s ' ' | cut -d' ' -f3,5,6 | tr '\n' ';')"
done; done
kill $smi
for m in llama3_8b_4layers_fused llama3_8b_4layers; do
  FFNC_NO_TUNE=1 timeout 120 ncu --clock-control none --kernel-name regex:"^k[0-9]_t" --launch-skip 8 --launch-count 8 \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    ./ffnc bench $S/$m.ffn --tokens 8192 --reps 3 --no-graphs --no-ceilings >"$out/ncu_$m.txt" 2>&1
  echo "== ncu $m: exit $?"; grep -E "^  k|duration|per_second|hmma" "$out/ncu_$m.txt" | cut -c1-100 | head -40
done
