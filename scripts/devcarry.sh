#!/bin/sh
# scripts/devcarry.sh: packs the build made here for a call on the lent GPU machine
# (scripts/gpu_session.sh unpacks it there): .devcarry/build is a stripped copy of build/
# without objects, archives, cubins, weights or test output (the device tool carries at most
# 64 MiB), .devcarry/cache.tar.xz the kernel cache build/test-kernel-cache that NVRTC filled
# here (`ctest -L nvrtc`, `ffnc bench --compile-only`), .devcarry/lib the libjansson the GPU
# machine lacks. Pass `carry: [".devcarry"]` to the device call.
set -eu
cd "$(dirname "$0")/.."
rm -rf .devcarry/build
mkdir -p .devcarry/lib
cp -a build .devcarry/build
cd .devcarry/build
find . \( -name "*.o" -o -name "*.cubin" -o -name "*.ffnx" -o -name "*.safetensors" -o -name "*.st" -o -name "*.a" \) -delete
rm -rf Testing tests/no_gpu tests/jit_units tests/cli_outputs host_examples analyze_* install* test-kernel-cache
find . -path "*corpus*" -prune -exec rm -rf {} + 2>/dev/null || true
find . -type f -perm -u+x | while read -r f; do
  if file "$f" | grep -q ELF; then strip "$f"; fi
done
cd ../..
# the kernel cache only while it fits the carry limit with the rest (the GPU machine's 16 cores
# compile a model in about a second anyway)
rm -f .devcarry/cache.tar.xz
if [ -d build/test-kernel-cache ] && [ "$(du -sm build/test-kernel-cache | cut -f1)" -lt 150 ]; then
  tar cJf .devcarry/cache.tar.xz -C build test-kernel-cache
fi
cp -a /usr/lib/x86_64-linux-gnu/libjansson.so.4* .devcarry/lib/ 2>/dev/null || true
du -sh .devcarry
