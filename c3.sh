set -u
O=$1; mkdir -p $O/r
sh scripts/gpu_session.sh $O/r >/dev/null 2>&1   # unpack only
cd /work/main/build
export FFNC_CACHE_DIR=/work/main/build/test-kernel-cache FFNC_SOURCE_DIR=/work/main LD_LIBRARY_PATH=/work/main/.devcarry/lib
S=/work/main/bench/suite
timeout 200 ctest -R "gpu_grad" --output-on-failure -j 4 >$O/r/grad.log 2>&1
echo "grad tests: exit $?"; grep -E "tests passed|\(Failed\)" $O/r/grad.log
for s in 151 373 378 451 816; do
  timeout 60 ./tests/ffn_diffgen --mode gpu --count 1 --seed $s --tokens 1,7,64,300 >$O/r/seed_$s.log 2>&1
  echo "seed $s: exit $? $(grep -c FAIL $O/r/seed_$s.log) FAIL lines"
done
for m in llama3_70b_layer_i4g128 llama3_70b_layer_i8; do
  timeout 100 /usr/local/cuda/bin/ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats -k regex:"^k0_wq" -c 1 \
    ./ffnc bench $S/$m.ffn --tokens 1 --reps 1 --no-graphs --no-ceilings >$O/r/ncu_$m.txt 2>&1
  echo "ncu $m: exit $?"
done
cd $O && tar czf r.tgz r && rm -rf r
