// bench_epi.cuh: the bench's test epilogue, written the way ffnc's code generator writes one.
// out = act(scale * (v - mean * wsum)) + res, stored as TO, where scale/mean come from the row
// statistics: STATS 0: scale 1; STATS 1 (RMSNorm): rsqrt(sumsq/K + eps); STATS 2 (LayerNorm): mean
// sum/K, rsqrt(var + eps), and wsum[c] = sum_k B[c, k] undoes the mean (the gain is folded into B).
// act: S == 2: silu(gate) * up; S == 1: identity.
#pragma once
#include "common.cuh"

template <int S, int STATS, class TO> struct BenchEpi {
  TO *out;           // (M, N)
  const TO *res;     // (M, N) residual
  const float *wsum; // (S*N rounded up to 8*S) merged-column sums of B, STATS == 2 only
  int N, K;
  float eps;

  // gemm_sm90's epilogue calls the row half once per row and the column half per pair
  struct Row {
    float rsum, rsumsq;
  };
  __device__ __forceinline__ Row prep(int, float rsum, float rsumsq) const { return Row{rsum, rsumsq}; }
  static constexpr int QUADS = 0; // stores pair by pair (no compute, store4: gemm_sm90.cuh, sm90_epi_quads)
  static constexpr long long NCOLS = 0;
  struct Src {}; // the residual is read in operator() (ffnc's functors prefetch theirs: Epi::load)
  __device__ __forceinline__ Src load(int, int, int) const { return Src{}; }
  __device__ __forceinline__ void apply(const Row &r, const Src &, int row, int col, int ncols,
                                        const float (&v)[S][2]) const {
    (*this)(row, col, ncols, v, r.rsum, r.rsumsq);
  }
  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[S][2], float rsum,
                                             float rsumsq) const {
    float scale = 1.f, mean = 0.f;
    if (STATS == 1) scale = rsqrtf(rsumsq / (float)K + eps);
    if (STATS == 2) {
      mean = rsum / (float)K;
      scale = rsqrtf(fmaxf(rsumsq / (float)K - mean * mean, 0.f) + eps);
    }
    const size_t idx = (size_t)row * N + col;
    float o[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (i >= ncols) break;
      const int c = col + i;
      float y[S];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        float w = STATS == 2 ? wsum[(c / 8) * 8 * S + s * 8 + c % 8] : 0.f;
        y[s] = scale * (v[s][i] - mean * w);
      }
      o[i] = (S == 2 ? ffn::op_silu(y[0]) * y[1] : y[0]) + ffn::to_f32(res[idx + i]);
    }
    if (ncols == 2 && (idx & 1) == 0) {
      if constexpr (sizeof(TO) == 2) {
        *(ffn::u32 *)(out + idx) = ffn::pack2<TO>(o[0], o[1]);
      } else {
        *(float2 *)(out + idx) = make_float2(o[0], o[1]);
      }
    } else {
      for (int i = 0; i < ncols; ++i) out[idx + i] = ffn::from_f32<TO>(o[i]);
    }
  }
};
