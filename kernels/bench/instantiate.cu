// nvcc -cubin instantiation of the recommended configurations, for ptxas resource reports
// (make -C kernels/bench resources). Not used by the bench itself, which goes through NVRTC.
#include "gemm_sm80.cuh"
#include "gemm_simt.cuh"
#include "bench_epi.cuh"
using namespace ffn;
#define SM80(NAME, BM, BN, BK, WM, WN, ST, MINB, S, STATS, T)                                           \
  extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)                         \
      NAME(GemmArgs g, BenchEpi<S, STATS, T> epi) {                                                       \
    extern __shared__ __align__(128) char smem[];                                                         \
    gemm_sm80<BM, BN, BK, WM, WN, ST, S, STATS, T>(g, epi, smem);                                         \
  }
#define SIMT(NAME, BM, BN, BK, TM, TN, MINB, S, STATS, T)                                                \
  extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB)                              \
      NAME(GemmArgs g, BenchEpi<S, STATS, T> epi) {                                                       \
    extern __shared__ __align__(128) char smem[];                                                         \
    gemm_simt<BM, BN, BK, TM, TN, S, STATS, T>(g, epi, smem);                                             \
  }
SM80(d16x128x64_s2, 16, 128, 64, 16, 32, 4, 3, 2, 1, bf16)
SM80(d16x256x64_s2, 16, 256, 64, 16, 32, 4, 1, 2, 1, bf16)
SM80(s64x128x64_s2, 64, 128, 64, 32, 64, 4, 2, 2, 1, bf16)
SM80(m128x128x32_s2, 128, 128, 32, 64, 64, 4, 2, 2, 1, bf16)
SM80(p128x256x32_s2, 128, 256, 32, 64, 64, 4, 1, 2, 1, bf16)
SM80(p128x256x32_s1, 128, 256, 32, 64, 64, 4, 1, 1, 0, bf16)
SM80(p128x256x64_s2, 128, 256, 64, 64, 64, 3, 1, 2, 2, f16)
SM80(p256x128x32_s1, 256, 128, 32, 64, 64, 4, 1, 1, 2, bf16)
SIMT(simt32x64_s2, 32, 64, 16, 4, 4, 4, 2, 1, float)
SIMT(simt128x128_s2, 128, 128, 8, 8, 8, 2, 2, 2, float)
SIMT(simt128x128_s1, 128, 128, 8, 8, 8, 2, 1, 0, float)
