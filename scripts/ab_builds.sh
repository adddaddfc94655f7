#!/bin/sh
# scripts/ab_builds.sh [PATCH...]: the other builds of an A/B on the GPU machine, made here.
# `old`: main's HEAD, stripped to .devcarry/ffnc_alt; with PATCHes, `alt`: main's HEAD with them
# applied, stripped to .devcarry/ffnc_alt2. Each in its own worktree under /tmp (removed after),
# so this checkout, which is `new` (build/ffnc), is left alone. Kernel headers are embedded at
# build time: each binary carries its own kernels. Then `sh scripts/devcarry.sh` and a device
# call with an A/B part (scripts/gpu_session.sh: actepi, wqsplit, ...).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
base=$(git -C "$here" rev-parse main)
mkdir -p "$here/.devcarry"
build_at() { # NAME OUT [PATCH...]: main's HEAD plus the patches, built and stripped to OUT
  dir=/tmp/ab_$1 out=$2
  shift 2
  git -C "$here" worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
  git -C "$here" worktree add -q --detach "$dir" "$base"
  for p in "$@"; do
    case $p in /*) ;; *) p=$here/$p ;; esac
    git -C "$dir" apply "$p" || { echo "ab_builds: $p does not apply to main ($base)" >&2; exit 1; }
  done
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$dir/build" --target ffnc >/dev/null
  strip -o "$out" "$dir/build/ffnc"
  git -C "$here" worktree remove --force "$dir"
  echo "ab_builds: $out = main $(git -C "$here" rev-parse --short "$base")${*:+ + $*}"
}
build_at old "$here/.devcarry/ffnc_alt"
if [ $# -gt 0 ]; then
  build_at alt "$here/.devcarry/ffnc_alt2" "$@"
else
  rm -f "$here/.devcarry/ffnc_alt2" # actepi runs a third build only where this file is
fi
