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
// provably agrees with the double-precision rule (f8_codes), so the pass runs near the copy rate
// (with an IEEE division per element it was bound by instruction issue: 8B sublayer at 8192
// tokens, 123 and 280 us for its two quantizers under ncu).
#pragma once
#include "common.cuh"
#include "ewise.cuh" // row_sum, row_max
#include "numfmt.cuh"

namespace ffn {

// Two fp8 codes (lo in the low byte) of x / s, equal to the reference's ffn_f8_code(x, s) where
// they clear `ok`'s test. With r = RN(1 / s), q = RN(x * r) is within 2^-22 |x / s| of the
// quotient (two roundings of at most 2^-24 relative each, for normal q). Rounding to fp8 is
// monotone, so wherever q (1 - 2^-20) and q (1 + 2^-20) -- each rounded once more, the interval
// still wider than 2^-21 |q| on each side -- get the same code, so does every value between
// them, x / s among them. Where the two differ (q within 2^-20 of a rounding boundary: about one
// element in 2^16) or q is not finite (an infinite or NaN element, an infinite scale), ok is
// cleared and the caller takes the reference's double path (f8_codes2_exact) for its chunk. For
// q below the f32 normals both ends round to a signed zero, as x / s does.
//
// The test is a flag, not a branch per pair, and the double path is a call, once per chunk: the
// double path inlined at each of the 56 pairs of an unrolled row of 28672 values made that
// kernel 166 KB of code, which a block per row (decode) fetched from memory as it ran, every
// launch (the GEMM between evicts it): 20 us to quantize one row of the 70B sublayer's SwiGLU
// output on an H100; a call behind a branch per pair cut the code to 37 KB but cost 128 rows 1%
// (each pair its own basic block). kernels/NOTES.md, twenty-first and twenty-second sessions.
template <int E5M2> __device__ __noinline__ u32 f8_codes2_exact(float x0, float x1, float s) {
  return ffn_f8_code(x0, s, E5M2) | ffn_f8_code(x1, s, E5M2) << 8;
}
template <int E5M2> __device__ __forceinline__ u32 f8_codes2_try(float x0, float x1, float r, bool &ok) {
  const float q0 = x0 * r, q1 = x1 * r;
  constexpr float DN = 1.f - 0x1p-20f, UP = 1.f + 0x1p-20f;
  const u32 lo = E5M2 ? pack_e5m2x2(q0 * DN, q1 * DN) : pack_e4m3x2(q0 * DN, q1 * DN);
  const u32 hi = E5M2 ? pack_e5m2x2(q0 * UP, q1 * UP) : pack_e4m3x2(q0 * UP, q1 * UP);
  ok = ok & (lo == hi) & (fabsf(q0) <= 3.4e38f) & (fabsf(q1) <= 3.4e38f);
  return lo;
}

// The codes of V (1, 2, 4 or 8) values of a chunk as one word (value j in byte j).
template <int V, int E5M2> __device__ __forceinline__ u64 f8_codes(const float (&v)[V], float s, float r) {
  u64 w = 0;
  bool ok = true;
  if constexpr (V == 1) {
    w = f8_codes2_try<E5M2>(v[0], 0.f, r, ok) & 0xffu;
  } else {
#pragma unroll
    for (int j = 0; j < V / 2; ++j) w |= (u64)f8_codes2_try<E5M2>(v[2 * j], v[2 * j + 1], r, ok) << (16 * j);
  }
  if (__builtin_expect(!ok, 0)) {
    w = 0;
    if constexpr (V == 1) {
      w = f8_codes2_exact<E5M2>(v[0], 0.f, s) & 0xffu;
    } else {
#pragma unroll
      for (int j = 0; j < V / 2; ++j) w |= (u64)f8_codes2_exact<E5M2>(v[2 * j], v[2 * j + 1], s) << (16 * j);
    }
  }
  return w;
}

// Eight consecutive elements of T from their raw 16 (16-bit T) or 32 bytes (f32) as floats.
// (Through opaque: a row held as words is unpacked again in each pass, not kept unpacked.)
template <class T> __device__ __forceinline__ void unpack8(const uint4 *w, float (&f)[8]) {
  if constexpr (sizeof(T) == 2) {
    unpack2<T>(opaque(w[0].x), f[0], f[1]);
    unpack2<T>(opaque(w[0].y), f[2], f[3]);
    unpack2<T>(opaque(w[0].z), f[4], f[5]);
    unpack2<T>(opaque(w[0].w), f[6], f[7]);
  } else {
    f[0] = __uint_as_float(opaque(w[0].x)), f[1] = __uint_as_float(opaque(w[0].y));
    f[2] = __uint_as_float(opaque(w[0].z)), f[3] = __uint_as_float(opaque(w[0].w));
    f[4] = __uint_as_float(opaque(w[1].x)), f[5] = __uint_as_float(opaque(w[1].y));
    f[6] = __uint_as_float(opaque(w[1].z)), f[7] = __uint_as_float(opaque(w[1].w));
  }
}

// The codes of V consecutive values v (from element i, a multiple of V; the tensor 16-byte
// aligned) of x / s, by f8_codes (the rowwise kernels that write an fp8 product's A, emit_cuda.c).
template <int V, int E5M2>
__device__ __forceinline__ void st_f8_codes(void *p, long long i, const float (&v)[V], float s, float r) {
  u8 *q = (u8 *)p + i;
  const u64 w = f8_codes<V, E5M2>(v, s, r);
  if constexpr (V == 8)
    *(uint2 *)q = make_uint2((u32)w, (u32)(w >> 32));
  else if constexpr (V == 4)
    *(u32 *)q = (u32)w;
  else if constexpr (V == 2)
    *(u16 *)q = (u16)w;
  else
    *q = (u8)w;
}

// x [m, K] of T (bf16, f16 or f32) -> q [m, K] fp8 codes, s [m] f32; K % 16 == 0. stats (or
// NULL): [m][2] the sum and the sum of squares of each row of x (f32, as ffn_row_stats), for a
// product whose epilogue applies a folded norm (FFN Fusion folds the gains into the weights).
//
// Laid out as the generated rowwise kernels (emit_cuda.c, "rows in registers"): TPR threads per
// row, THREADS / TPR rows per block, each thread on chunks of 8 elements lane, lane + TPR, ...
// Rows of up to 64 words per thread (K = 32768 16-bit values at TPR = 256) are read once into
// registers, 16 bytes a load, and the codes come from there; wider ones are read twice (L1/L2).
// red: THREADS / 32 floats of shared memory.
template <class T, int E5M2, int THREADS, int TPR, long long K>
__device__ __forceinline__ void quant_rows_f8(const T *__restrict__ x, u8 *__restrict__ q, float *__restrict__ s,
                                              float *__restrict__ stats, long long m, float *red) {
  constexpr int NV = (int)(K / 8), CH = (NV + TPR - 1) / TPR, RPB = THREADS / TPR;
  constexpr int U4 = sizeof(T) == 2 ? 1 : 2; // 16-byte words per chunk
  constexpr bool RESIDENT = CH * U4 * 4 <= 64;
  const int lane = threadIdx.x % TPR;
  for (long long row0 = (long long)blockIdx.x * RPB; row0 < m; row0 += (long long)gridDim.x * RPB) {
    // a row past m (the last block's) reads the last row again and stores nothing
    const long long r = row0 + threadIdx.x / TPR, row = r < m ? r : m - 1;
    const bool live = r < m;
    const uint4 *xr = (const uint4 *)(x + row * K);
    uint4 w[RESIDENT ? CH * U4 : U4];
    float amax = 0.f, sum = 0.f, sumsq = 0.f;
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int v = u * TPR + lane;
      if (CH * TPR != NV && v >= NV) break;
      uint4 *c = RESIDENT ? &w[u * U4] : w;
#pragma unroll
      for (int j = 0; j < U4; ++j) c[j] = xr[v * U4 + j];
      float f[8];
      unpack8<T>(c, f);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        amax = fmaxf(amax, fabsf(f[i])); // skips NaN, as the reference's fmax
        sum += f[i];
        sumsq += f[i] * f[i];
      }
    }
    if (stats) { // uniform branch: stats is a kernel argument
      sum = row_sum<TPR, THREADS>(sum, red);
      sumsq = row_sum<TPR, THREADS>(sumsq, red);
      if (lane == 0 && live) stats[2 * row] = sum, stats[2 * row + 1] = sumsq;
    }
    amax = row_max<TPR, THREADS>(amax, red);
    const float sc = ffn_f8_scale((double)amax, E5M2), rc = __frcp_rn(sc);
    if (lane == 0 && live) s[row] = sc;
    uint2 *qr = (uint2 *)(q + row * K);
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int v = u * TPR + lane;
      if (CH * TPR != NV && v >= NV) break;
      uint4 c[U4];
#pragma unroll
      for (int j = 0; j < U4; ++j) c[j] = RESIDENT ? w[u * U4 + j] : xr[v * U4 + j];
      float f[8];
      unpack8<T>(c, f);
      const u64 out = f8_codes<8, E5M2>(f, sc, rc);
      if (live) qr[v] = make_uint2((u32)out, (u32)(out >> 32));
    }
  }
}

} // namespace ffn
