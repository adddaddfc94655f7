#!/bin/sh
# tp_run_test.sh FFNC MODEL WORKDIR [OPTION...]: `ffnc run --tp 2 --device gpu` (the two ranks on
# devices 0 and 1, an NCCL all-reduce per FFN sublayer) agrees with the whole program on one GPU
# and with the CPU reference, at T = 1, 7, 64, 1000 and 4096 (FFNC_TEST_TOKENS overrides);
# OPTIONs go to every run (--ffn-fusion 0..4). Skipped (77) with fewer than 2 GPUs or no NCCL.
# NCCL: $FFNC_NCCL_LIBRARY, else libnccl.so.2 from the loader's path, else the one PyTorch's
# pip wheel ships (site-packages/nvidia/nccl/lib), found through python3 (nccl_env.sh).
set -u
ffnc=$1 model=$2 dir=$3
shift 3
mkdir -p "$dir" && cd "$dir" || exit 1
. "$(dirname "$0")/nccl_env.sh"
for T in $(echo "${FFNC_TEST_TOKENS:-1,7,64,1000,4096}" | tr , ' '); do
  "$ffnc" gen "$model" --weights w.st --inputs in.st --dim T=$T --seed $((T + 11)) || exit 1
  "$ffnc" run "$model" "$@" --tp 2 --device gpu --weights w.st --input in.st --output tp.st 2>err.txt; rc=$?
  if [ $rc -eq 3 ] && grep -Eq "needs 2 GPUs|no NCCL|not a usable NCCL" err.txt; then echo "SKIP: $(cat err.txt)"; exit 77; fi
  [ $rc -eq 0 ] || { echo "FAIL: T=$T: --tp 2 --device gpu: exit $rc"; cat err.txt; exit 1; }
  "$ffnc" run "$model" "$@" --device gpu --weights w.st --input in.st --output gpu.st || { echo "FAIL: T=$T: one GPU"; exit 1; }
  "$ffnc" run "$model" "$@" --device cpu --weights w.st --input in.st --output cpu.st || { echo "FAIL: T=$T: CPU"; exit 1; }
  # the ranks round their [T, D] partial sums to the model's type before adding them: 16-bit
  # models differ from the whole program by about one rounding of the sum
  "$ffnc" compare tp.st gpu.st --tol 2e-2 || { echo "FAIL: T=$T: tp against one GPU"; exit 1; }
  "$ffnc" compare tp.st cpu.st --tol 2e-2 || { echo "FAIL: T=$T: tp against the CPU reference"; exit 1; }
  echo "T=$T: ok"
done
# a missing NCCL is named, with how to point at it
FFNC_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$ffnc" run "$model" "$@" --tp 2 --device gpu --weights w.st \
  --input in.st --output none.st 2>err.txt; rc=$?
[ $rc -eq 3 ] && grep -q "no NCCL: cannot load /nonexistent/libnccl.so.2 (FFNC_NCCL_LIBRARY)" err.txt &&
  grep -q "set FFNC_NCCL_LIBRARY" err.txt || { echo "FAIL: missing NCCL: exit $rc"; cat err.txt; exit 1; }
[ ! -e none.st ] || { echo "FAIL: an output was written without NCCL"; exit 1; }
echo PASSED
