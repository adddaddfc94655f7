# nccl_env.sh (sourced by the gpu_multi tests): where neither $FFNC_NCCL_LIBRARY nor the loader
# gives a libnccl.so.2, the one a pip wheel ships (PyTorch's nvidia-nccl-cu12/cu13, under
# site-packages/nvidia/). NVLink multicast stays off (the lent machines' rule; ffnc needs none).
export NCCL_NVLS_ENABLE=0
if [ -z "${FFNC_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  lib=$(python3 -c "import glob, os, sys; print(next(f for p in sys.path for f in glob.glob(os.path.join(p, 'nvidia', '**', 'libnccl.so.2'), recursive=True)))" 2>/dev/null)
  [ -n "$lib" ] && [ -e "$lib" ] && export FFNC_NCCL_LIBRARY="$lib"
fi
