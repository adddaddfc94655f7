#!/bin/sh
# scripts/test.sh: on a fresh machine, install what is missing, build, and run every test.
# GPU tests (ctest label gpu) skip with the reason where there is no GPU.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
cd build && ctest --output-on-failure -j "$(nproc)"
