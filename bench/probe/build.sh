#!/bin/sh
# bench/probe/build.sh OUTDIR: the wqrs probe (bench/probe/wqrs_probe.cpp) and its cubin, built here
# with nvcc for the GPU machine (sm_90a), into OUTDIR (.devcarry/probe for a device call).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$here/.devcarry/probe}
mkdir -p "$out"
# wqrs.cubin, and the experiment's variants (kernels/gemm_wqrs.cuh: FFN_WQRS_*) beside it
for v in ""; do
  nvcc -cubin -arch=sm_90a -std=c++17 -O3 -Xptxas -v -I "$here/kernels" -I "$here/ir" ${v:+-DFFN_WQRS_$v} \
    -o "$out/wqrs${v:+_$v}.cubin" "$here/bench/probe/wqrs_kernel.cu" 2>&1 | grep -E "error|warning|spill" | sort | uniq -c || true
done
nvcc -std=c++17 -O2 -I "$here/kernels" -o "$out/wqrs_probe" "$here/bench/probe/wqrs_probe.cpp" -lcuda
echo "probe: $out/wqrs_probe $out/wqrs.cubin"
