// bench/probe/wqrs_kernel.cu: the device half of bench/probe/wqrs_probe.cpp (compiled to a cubin
// with nvcc -cubin -arch=sm_90a, loaded by the probe through the driver API, as ffnc loads its own).
#include "gemm_wqrs.cuh"

template <int S> struct ProbeEpi {
  float *out;   // [S][M][N]
  float *stats; // [M]
  int M, N;
  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[S][2], float rsum,
                                             float rsumsq) const {
    (void)rsum;
    for (int s = 0; s < S; ++s)
      for (int e = 0; e < ncols; ++e) out[((size_t)s * M + row) * N + col + e] = v[s][e];
    if (col == 0) stats[row] = rsumsq;
  }
};

#define PROBE(BM, S, STATS)                                                                              \
  extern "C" __global__ void __launch_bounds__(384, 1)                                                   \
      probe_##BM##_##S##_##STATS(ffn::GemmArgs g, const __grid_constant__ ffn::TmaMaps t, ProbeEpi<S> epi) { \
    extern __shared__ __align__(128) char smem[];                                                        \
    g.tma = &t;                                                                                          \
    ffn::gemm_wqrs<BM, 8, S, STATS>(g, epi, smem);                                                       \
  }
PROBE(128, 1, 1)
PROBE(128, 2, 1)
PROBE(64, 1, 1)
PROBE(64, 2, 1)
PROBE(128, 1, 0)
PROBE(128, 2, 0)
