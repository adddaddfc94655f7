#!/bin/sh
# scripts/deps.sh: installs what the build needs where it is missing (Debian/Ubuntu, as root or
# with sudo): flex, bison, jansson, dlpack headers, cmake, ninja, clang (for the libFuzzer
# targets), pkg-config and python3 (tests of the installed library and of python/ffnc). The
# CUDA Toolkit (headers and NVRTC, no GPU needed) must already be installed; we look for it in
# /usr/local/cuda.
set -eu
need=""
command -v flex >/dev/null 2>&1 || need="$need flex"
command -v bison >/dev/null 2>&1 || need="$need bison"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v ninja >/dev/null 2>&1 || need="$need ninja-build"
command -v clang >/dev/null 2>&1 || need="$need clang"
command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
command -v python3 >/dev/null 2>&1 || need="$need python3"  # tests of python/ffnc (standard library only)
command -v readelf >/dev/null 2>&1 || need="$need binutils"  # the install test reads the exports
[ -f /usr/include/jansson.h ] || need="$need libjansson-dev"
[ -f /usr/include/dlpack/dlpack.h ] || need="$need libdlpack-dev"
if command -v clang >/dev/null 2>&1; then
  rt=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null || true)
  [ -f "$rt" ] || need="$need libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
fi
if [ -n "$need" ]; then
  echo "deps: installing$need"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need >/dev/null
fi
if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/nvrtc.h" ]; then
  echo "deps: the CUDA Toolkit is missing (no ${CUDA_HOME:-/usr/local/cuda}/include/nvrtc.h)." >&2
  echo "      Install it from NVIDIA (no GPU is needed to build and to run the non-GPU tests)." >&2
  exit 1
fi
