// nvcc -cubin instantiation of the sm_90a configurations, for ptxas resource reports
// (make -C kernels/bench resources). Not used by the bench itself, which goes through NVRTC.
#include "gemm_sm90_persistent.cuh" // includes gemm_sm90.cuh
#include "bench_epi.cuh"
using namespace ffn;
#define SM90(NAME, BM, BN, ST, CWG, CTAS, S, STATS, T)                                                         \
  extern "C" __global__ void __launch_bounds__(128 * (CWG + 1), CTAS) NAME(GemmArgs g, BenchEpi<S, STATS, T> epi) { \
    extern __shared__ __align__(128) char smem[];                                                               \
    gemm_sm90<BM, BN, 64, ST, S, STATS, T, CWG, CTAS>(g, epi, smem);                                            \
  }
SM90(p128x256_s2_st1, 128, 256, 4, 2, 1, 2, 1, bf16)
SM90(p128x256_s1_st0, 128, 256, 4, 2, 1, 1, 0, bf16)
SM90(p128x256_s2_st2_f16, 128, 256, 4, 2, 1, 2, 2, f16)
SM90(m128x128_s2_st1, 128, 128, 6, 2, 1, 2, 1, bf16)
SM90(d64x128_s2_st1, 64, 128, 4, 1, 2, 2, 1, bf16)
SM90(d64x128_s1_st0, 64, 128, 4, 1, 2, 1, 0, bf16)
#define SM90P(NAME, BM, BN, ST, PP, S, STATS, T)                                                               \
  extern "C" __global__ void __launch_bounds__(384, 1) NAME(GemmArgs g, BenchEpi<S, STATS, T> epi) {          \
    extern __shared__ __align__(128) char smem[];                                                               \
    gemm_sm90_persistent<BM, BN, 64, ST, S, STATS, T, PP>(g, epi, smem);                                        \
  }
SM90P(pp128x128_s2_st1, 128, 128, 6, true, 2, 1, bf16)
SM90P(pp128x128_s1_st0, 128, 128, 6, true, 1, 0, bf16)
SM90P(coop128x256_s2_st1, 128, 256, 4, false, 2, 1, bf16)
SM90P(coop128x256_s1_st0, 128, 256, 4, false, 1, 0, bf16)
