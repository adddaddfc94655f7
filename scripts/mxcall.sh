#!/bin/sh
# scripts/mxcall.sh OUT: the device call that pending/README.md asks for (mxiss and mxw0). Made
# here first: `git apply pending/mxiss.patch`, build (`new`), `sh scripts/ab_builds.sh
# pending/mxw0.patch` (.devcarry/ffnc_alt = main, ffnc_alt2 = mxw0), `sh scripts/devcarry.sh`;
# then on the device `sh scripts/mxcall.sh $OUT` (carry .devcarry), about 5 minutes: the
# weight-only GPU tests on `new`, the 8B int4 A/B of the three builds at 65 and 128 tokens (two
# alternating rounds, us), and ncu's source page of the 128-token products (scripts/mxsrc.sh).
set -u
out=$1
here=$(cd "$(dirname "$0")/.." && pwd)
GPU_TESTS_RE=${GPU_TESTS_RE:-wq_} sh "$here/scripts/gpu_session.sh" "$out" tests
cd /work/main/build || exit 1
export LD_LIBRARY_PATH=/work/main/.devcarry/lib FFNC_NO_TUNE=1 FFNC_CACHE_DIR=/tmp/mxcall-cache
M=/work/main/bench/suite/llama3_8b_layer_i4g128.ffn
for r in 1 2; do
  for b in ./ffnc /work/main/.devcarry/ffnc_alt /work/main/.devcarry/ffnc_alt2; do
    [ -x "$b" ] || continue
    t=$(timeout 60 "$b" bench $M --tokens 65,128 --reps 20 --no-graphs --no-ceilings 2>&1 |
      awk '$2 == "ffnc" { printf "%s:%s(%s) ", $1, $4, $NF }')
    echo "== round $r $b $t"
  done
done 2>&1 | tee "$out/mxab.txt"
MXSRC_N=2 MXSRC_T=128 sh "$here/scripts/mxsrc.sh" "$out"
