#!/bin/sh
# bench/probe/build.sh OUTDIR: the wqrs probe (bench/probe/wqrs_probe.cpp) and its cubin, built here
# with nvcc for the GPU machine (sm_90a), into OUTDIR (.devcarry/probe for a device call).
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$here/.devcarry/probe}
mkdir -p "$out"
nvcc -cubin -arch=sm_90a -std=c++17 -O3 -Xptxas -v -I "$here/kernels" -I "$here/ir" -o "$out/wqrs.cubin" \
  "$here/bench/probe/wqrs_kernel.cu" 2>&1 | grep -E "error|warning|registers|spill|stack|Function properties for probe" || true
nvcc -std=c++17 -O2 -o "$out/wqrs_probe" "$here/bench/probe/wqrs_probe.cpp" -lcuda
echo "probe: $out/wqrs_probe $out/wqrs.cubin"
