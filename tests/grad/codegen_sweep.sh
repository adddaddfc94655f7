#!/bin/sh
# tests/grad/codegen_sweep.sh FFNC SRCDIR: every example and GPU test model through the passes and
# the CUDA generator (no NVRTC, so it runs everywhere), for sm_80 and sm_90, as a program, a
# training forward (--keep) and both backward graphs (--grad, --grad --keep). The only refusal
# allowed is fp8 on sm_80; an internal error or a kernel over its tensor slots fails the test.
set -u
ffnc=$1 src=$2 fails=0 n=0
for m in "$src"/examples/*.ffn "$src"/tests/gpu/models/*.ffn; do
  for arch in sm_80 sm_90; do
    for mode in "" "--keep" "--grad" "--grad --keep"; do
      n=$((n + 1))
      # shellcheck disable=SC2086
      if ! err=$("$ffnc" build "$m" $mode --arch $arch --emit cuda -o /dev/null 2>&1); then
        case $err in
        *"need sm_89 or newer; the target is sm_80"*) ;;
        *) echo "FAIL: ffnc build $m $mode --arch $arch: $err"; fails=$((fails + 1)) ;;
        esac
      fi
    done
  done
done
echo "$n builds, $fails failed"
[ "$fails" -eq 0 ]
