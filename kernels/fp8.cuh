// fp8.cuh: the run-time half of fp8 matrix products: quantizing activations, row by row, into the
// codes and scales the tensor-core templates read (GemmArgs: A, sa). The weights' half runs once at
// load time (prep.cuh: ffn_prep_f8_scale, ffn_prep_f8_pack). Both follow the contract at the top of
// ir/interp.c through kernels/numfmt.cuh, so the GPU's codes are the reference's, bit for bit:
//
//   sa[r] = ffn_f8_scale(max_k |a[r,k]|)          (the largest magnitude of the stored values)
//   q[r,k] = ffn_f8_code(a[r,k], sa[r])            (a / sa in double, rounded once to fp8)
//
// Rows are grid-strided like the generated rowwise kernels (a block per row, KArgs.m rows). The
// codes come from f32 division and the hardware conversion wherever that provably agrees with
// the double-precision rule (f8_codes2), so the pass runs near the copy rate.
#pragma once
#include "common.cuh"
#include "numfmt.cuh"

namespace ffn {

// Whether the f32 quotient q = RN24(x / s) may round to fp8 differently from the reference's
// RN_fp8(RN53(x / s)): only when q is exactly halfway between two fp8 values (any such midpoint
// is an f32, so q cannot have crossed one), or NaN. The bits below the fp8 quantum at q's
// magnitude are then exactly one half.
template <int E5M2> __device__ __forceinline__ bool f8_needs_exact(float q) {
  constexpr int M = E5M2 ? 2 : 3, EMIN = E5M2 ? -14 : -6; // mantissa bits, smallest normal exponent
  const u32 u = __float_as_uint(q) & 0x7fffffffu;
  if (u >= 0x7f800000u) return true;
  const int e = (int)(u >> 23) - 127;
  const int sh = 23 - M + (e < EMIN ? EMIN - e : 0);
  if (sh > 24) return false; // below half the smallest fp8 quantum: no midpoint reachable
  const u32 sig = (u & 0x7fffffu) | 0x800000u;
  return (sig & ((1u << sh) - 1u)) == 1u << (sh - 1);
}

// Two fp8 codes (lo in the low byte) of x / s, equal to the reference's ffn_f8_code: the f32
// quotient through the hardware's satfinite conversion, and the double path where they could
// differ (about one element in 2^20).
template <int E5M2> __device__ __forceinline__ u32 f8_codes2(float x0, float x1, float s) {
  const float q0 = __fdiv_rn(x0, s), q1 = __fdiv_rn(x1, s);
  u32 c = E5M2 ? pack_e5m2x2(q0, q1) : pack_e4m3x2(q0, q1);
  if (f8_needs_exact<E5M2>(q0) || f8_needs_exact<E5M2>(q1))
    c = ffn_f8_code(x0, s, E5M2) | ffn_f8_code(x1, s, E5M2) << 8;
  return c;
}

// Eight consecutive elements of T (16-byte aligned) as floats.
template <class T> __device__ __forceinline__ void load8(const T *p, float (&f)[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 w = *(const uint4 *)p;
    unpack2<T>(w.x, f[0], f[1]);
    unpack2<T>(w.y, f[2], f[3]);
    unpack2<T>(w.z, f[4], f[5]);
    unpack2<T>(w.w, f[6], f[7]);
  } else {
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  }
}

// Block-wide sum of v for THREADS threads through red[THREADS / 32] (every thread gets it).
template <int THREADS> __device__ __forceinline__ float quant_block_sum(float v, float *red) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < THREADS / 32 ? red[threadIdx.x] : 0.f;
  return warp_sum(v);
}

// x [m, K] of T (bf16, f16 or f32) -> q [m, K] fp8 codes, s [m] f32; K % 16 == 0. stats (or
// NULL): [m][2] the sum and the sum of squares of each row of x (f32, as ffn_row_stats), for a
// product whose epilogue applies a folded norm (FFN Fusion folds the gains into the weights).
template <class T, int E5M2, int THREADS>
__device__ __forceinline__ void quant_rows_f8(const T *__restrict__ x, u8 *__restrict__ q, float *__restrict__ s,
                                              float *__restrict__ stats, long long m, long long K) {
  __shared__ float red[THREADS / 32];
  const int tid = threadIdx.x;
  for (long long row = blockIdx.x; row < m; row += gridDim.x) {
    const T *xr = x + row * K;
    float amax = 0.f, sum = 0.f, sumsq = 0.f;
    for (long long c = tid; c < K / 8; c += THREADS) {
      float f[8];
      load8(xr + 8 * c, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        amax = fmaxf(amax, fabsf(f[i])); // skips NaN, as the reference's fmax
        sum += f[i];
        sumsq += f[i] * f[i];
      }
    }
    if (stats) { // uniform branch: stats is a kernel argument
      sum = quant_block_sum<THREADS>(sum, red);
      sumsq = quant_block_sum<THREADS>(sumsq, red);
      if (tid == 0) stats[2 * row] = sum, stats[2 * row + 1] = sumsq;
      __syncthreads(); // red is reused below
    }
    amax = warp_max(amax);
    if ((tid & 31) == 0) red[tid >> 5] = amax;
    __syncthreads();
    amax = tid < THREADS / 32 ? red[tid] : 0.f;
    if (tid < 32) amax = warp_max(amax);
    if (tid == 0) red[0] = amax;
    __syncthreads();
    const float sc = ffn_f8_scale((double)red[0], E5M2);
    __syncthreads(); // red is reused by the next row
    if (tid == 0) s[row] = sc;
    uint2 *qr = (uint2 *)(q + row * K);
    for (long long c = tid; c < K / 8; c += THREADS) {
      float f[8];
      load8(xr + 8 * c, f);
      uint2 out;
      out.x = out.y = 0u;
#pragma unroll
      for (int i = 0; i < 8; i += 2) (i < 4 ? out.x : out.y) |= f8_codes2<E5M2>(f[i], f[i + 1], sc) << (8 * (i & 3));
      qr[c] = out;
    }
  }
}

} // namespace ffn
