#!/bin/sh
# scripts/mxsrc.sh OUT: where the mixed-input tile's warps stall, per SASS instruction: ncu's source
# page of the first tmaq launch of the 8B int4 at 128 and 1024 tokens, as OUT/mxsrc_T.csv.xz
# (the reports themselves stay on the GPU machine: too many files for the device tool)
set -u
out=$1 S=/work/main/bench/suite tmp=/tmp/mxsrc
mkdir -p $tmp
cd /work/main/build || exit 1
for t in ${MXSRC_T:-128 1024}; do
  FFNC_NO_TUNE=1 timeout 120 ncu --kernel-name regex:tmaq --launch-count ${MXSRC_N:-1} --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -f -o $tmp/mx$t ./ffnc bench $S/llama3_8b_layer_i4g128.ffn --tokens $t --reps 1 \
    --no-graphs --no-ceilings >$tmp/mxsrc_$t.txt 2>&1
  echo "ncu $t: exit $?"
  timeout 60 ncu --import $tmp/mx$t.ncu-rep --page source --csv --print-source sass >$tmp/mxsrc_$t.csv 2>&1
  echo "source page $t: exit $? $(wc -l <$tmp/mxsrc_$t.csv) lines"
  xz -9 -c $tmp/mxsrc_$t.csv >"$out/mxsrc_$t.csv.xz"
  timeout 60 ncu --import $tmp/mx$t.ncu-rep --page details >"$out/mxdet_$t.txt" 2>&1
done
