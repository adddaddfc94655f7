// fp8.cuh: the run-time half of fp8 matrix products: quantizing activations, row by row, into the
// codes and scales the tensor-core templates read (GemmArgs: A, sa). The weights' half runs once at
// load time (prep.cuh: ffn_prep_f8_scale, ffn_prep_f8_pack). Both follow the contract at the top of
// ir/interp.c through kernels/numfmt.cuh, so the GPU's codes are the reference's, bit for bit:
//
//   sa[r] = ffn_f8_scale(max_k |a[r,k]|)          (the largest magnitude of the stored values)
//   q[r,k] = ffn_f8_code(a[r,k], sa[r])            (a / sa in double, rounded once to fp8)
//
// Rows are grid-strided like the generated rowwise kernels (a block per row, KArgs.m rows). The
// codes come from a product with the scale's reciprocal and the hardware conversion wherever that
// provably agrees with the double-precision rule (f8_codes2), so the pass runs near the copy rate
// (with an IEEE division per element it was bound by instruction issue: 8B sublayer at 8192
// tokens, 123 and 280 us for its two quantizers under ncu).
#pragma once
#include "common.cuh"
#include "numfmt.cuh"

namespace ffn {

// Two fp8 codes (lo in the low byte) of x / s, equal to the reference's ffn_f8_code(x, s). With
// r = RN(1 / s), q = RN(x * r) is within 2^-22 |x / s| of the quotient (two roundings of at most
// 2^-24 relative each, for normal q). Rounding to fp8 is monotone, so wherever q (1 - 2^-20) and
// q (1 + 2^-20) -- each rounded once more, the interval still wider than 2^-21 |q| on each side --
// get the same code, so does every value between them, x / s among them. Where the two differ
// (q within 2^-20 of a rounding boundary: about one element in 2^16) or q is not finite (an
// infinite or NaN element, an infinite scale), the reference's double path. For q below the f32
// normals both ends round to a signed zero, as x / s does.
template <int E5M2> __device__ __forceinline__ u32 f8_codes2(float x0, float x1, float s, float r) {
  const float q0 = x0 * r, q1 = x1 * r;
  constexpr float DN = 1.f - 0x1p-20f, UP = 1.f + 0x1p-20f;
  const u32 lo = E5M2 ? pack_e5m2x2(q0 * DN, q1 * DN) : pack_e4m3x2(q0 * DN, q1 * DN);
  const u32 hi = E5M2 ? pack_e5m2x2(q0 * UP, q1 * UP) : pack_e4m3x2(q0 * UP, q1 * UP);
  if (lo == hi && fabsf(q0) <= 3.4e38f && fabsf(q1) <= 3.4e38f) return lo;
  return ffn_f8_code(x0, s, E5M2) | ffn_f8_code(x1, s, E5M2) << 8;
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
    const float sc = ffn_f8_scale((double)red[0], E5M2), rc = __frcp_rn(sc);
    __syncthreads(); // red is reused by the next row
    if (tid == 0) s[row] = sc;
    uint2 *qr = (uint2 *)(q + row * K);
    for (long long c = tid; c < K / 8; c += THREADS) {
      float f[8];
      load8(xr + 8 * c, f);
      uint2 out;
      out.x = out.y = 0u;
#pragma unroll
      for (int i = 0; i < 8; i += 2) (i < 4 ? out.x : out.y) |= f8_codes2<E5M2>(f[i], f[i + 1], sc, rc) << (8 * (i & 3));
      qr[c] = out;
    }
  }
}

} // namespace ffn
