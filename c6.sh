set -u
O=$1; mkdir -p $O/r
sh scripts/gpu_session.sh $O/r >/dev/null 2>&1   # unpack only
cd /work/main/build
export FFNC_CACHE_DIR=/work/main/build/test-kernel-cache FFNC_SOURCE_DIR=/work/main LD_LIBRARY_PATH=/work/main/.devcarry/lib
S=/work/main/bench/suite
timeout 200 ctest -R "gpu_wq" --output-on-failure -j 4 >$O/r/tests.log 2>&1
echo "tests: exit $?"; grep -E "tests passed|\(Failed\)" $O/r/tests.log
timeout 150 ./ffnc bench $S/llama3_8b_layer_i4g128.ffn $S/llama3_70b_layer_i4g128.ffn $S/llama3_8b_layer_i8.ffn \
  $S/llama3_70b_layer_i8.ffn --tokens 1,16,64 --reps 20 --no-ceilings >$O/r/wq.txt 2>&1
echo "wq bench: exit $?"; grep -E "suite|  ffnc" $O/r/wq.txt
cd $O && tar czf r.tgz r && rm -rf r
