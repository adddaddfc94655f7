# nccl_env.sh (sourced by the gpu_multi tests): where neither $FFNC_NCCL_LIBRARY nor the loader
# gives a libnccl.so.2, the one PyTorch's pip wheel ships (site-packages/nvidia/nccl/lib).
if [ -z "${FFNC_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  [ -n "$lib" ] && [ -e "$lib" ] && export FFNC_NCCL_LIBRARY="$lib"
fi
